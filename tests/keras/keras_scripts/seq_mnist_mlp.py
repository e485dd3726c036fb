# A FlexFlow Keras example in FlexFlow's style (examples/python/keras/seq_mnist_mlp.py), written for
# the tests: MNIST from Keras' cache, Sequential, callbacks, fit and evaluate; prints a RESULT line.
from flexrt.keras.models import Sequential
from flexrt.keras.layers import Dense, Activation
import flexrt.keras.optimizers
from flexrt.keras.datasets import mnist
from flexrt.keras.callbacks import VerifyMetrics, EpochVerifyMetrics
from flexrt.keras.initializers import GlorotUniform, Zeros

import flexrt.core as ff
import numpy as np


def top_level_task():
    (x_train, y_train), _ = mnist.load_data()
    x_train = x_train.reshape(len(x_train), 784).astype('float32') / 255
    y_train = np.reshape(y_train.astype('int32'), (len(y_train), 1))
    model = Sequential()
    model.add(Dense(64, input_shape=(784,), kernel_initializer=GlorotUniform(123), bias_initializer=Zeros()))
    model.add(Activation('relu'))
    model.add(Dense(10))
    model.add(Activation("softmax"))
    opt = flexrt.keras.optimizers.SGD(learning_rate=0.05)
    model.compile(optimizer=opt, loss='sparse_categorical_crossentropy',
                  metrics=['accuracy', 'sparse_categorical_crossentropy'])
    print(model.summary())
    model.fit(x_train, y_train, epochs=3, shuffle=False,
              callbacks=[VerifyMetrics(50), EpochVerifyMetrics(99.9)])
    loss, acc, scce = model.evaluate(x=x_train, y=y_train)
    kernel, bias = model.get_layer(index=0).get_weights(model.ffmodel)
    print(f"RESULT loss {loss} accuracy {acc} kernel_sum {float(np.sum(kernel))} bias_sum {float(np.sum(bias))}")


if __name__ == "__main__":
    configs = ff.get_configs()
    ff.init_flexflow_runtime(configs)
    top_level_task()
