# FlexFlow's Keras operator examples in one script (elementwise_max_min, elementwise_mul_broadcast,
# gather, reduce_sum, rsqrt), in FlexFlow's style: multiple inputs, backend functions, Adam, MSE.
from flexrt.keras.layers import Dense, Input, Reshape, Multiply, Maximum
from flexrt.keras.backend.internal import gather, rsqrt
import flexrt.keras.optimizers
import flexrt.core as ff
import numpy as np


def top_level_task():
    rng = np.random.default_rng(0)
    input0 = Input(shape=(32,), dtype="float32")
    input1 = Input(shape=(10,), dtype="float32")
    index = Input(shape=(6, 2), dtype="int32")
    x0 = Dense(20, activation='relu')(input0)
    x1 = Dense(20, activation='relu')(input1)
    m = Maximum()([x0, x1])                                   # B,20
    b = Multiply()([Reshape((10, 2))(m), Reshape((10, 1))(Dense(10)(input1))])   # B,10,2 (broadcast)
    g = gather(b, index, axis=1)                              # B,6,2
    s = flexrt.keras.backend.sum(g, axis=1)                   # B,2
    out = Dense(1)(rsqrt(s * s + Reshape((2,))(Dense(2, activation='sigmoid')(input0))))
    model = flexrt.keras.models.Model([input0, input1, index], out)
    model.compile(optimizer=flexrt.keras.optimizers.Adam(learning_rate=0.01), loss='mean_squared_error',
                  metrics=['mean_squared_error'])
    print(model.summary())
    n = 96
    idx = rng.integers(0, 10, (n, 6, 2)).astype(np.int32)
    history = model.fit(x=[rng.standard_normal((n, 32)).astype(np.float32),
                           rng.standard_normal((n, 10)).astype(np.float32), idx],
                        y=rng.standard_normal((n, 1)).astype(np.float32), epochs=2, shuffle=False)
    w = model.ffmodel.get_weights()
    print(f"RESULT loss {history.history['loss'][-1]} weight_sum {float(sum(np.sum(v) for v in w.values()))}")


if __name__ == "__main__":
    configs = ff.get_configs()
    ff.init_flexflow_runtime(configs)
    top_level_task()
