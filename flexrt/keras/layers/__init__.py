"""FlexFlow's ``flexflow.keras.layers``: the Keras layers, each lowering to FFModel layers at compile.

Entry points: ``Input``, ``Dense``, ``Conv2D``, ``MaxPooling2D``, ``AveragePooling2D``, ``Flatten``,
``Activation``, ``Dropout``, ``BatchNormalization``, ``LayerNormalization``, ``Embedding``, ``Reshape``,
``Permute``, ``Conv2DTranspose``, ``UpSampling2D``, ``ZeroPadding2D``, the
merge layers and their functions, ``Layer``.
"""

from flexrt.keras.layers.base_layer import Layer
from flexrt.keras.layers.convolutional import Conv2D
from flexrt.keras.layers.core import Activation, Dense, Dropout, Embedding, Flatten, Permute, Reshape
from flexrt.keras.layers.input_layer import Input, InputLayer
from flexrt.keras.layers.merge import (Add, Concatenate, Maximum, Minimum, Multiply, Subtract, add, concatenate,
                                       maximum, minimum, multiply, subtract)
from flexrt.keras.layers.normalization import BatchNormalization, LayerNormalization
from flexrt.keras.layers.resampling import Conv2DTranspose, UpSampling2D, ZeroPadding2D
from flexrt.keras.layers.pool import (AveragePooling2D, GlobalAveragePooling1D, GlobalAveragePooling2D,
                                      GlobalMaxPooling1D, GlobalMaxPooling2D, MaxPooling2D, Pooling2D)

__all__ = ["Activation", "Add", "AveragePooling2D", "BatchNormalization", "Concatenate", "Conv2D", "Conv2DTranspose",
           "Dense", "LayerNormalization", "UpSampling2D", "ZeroPadding2D",
           "Dropout", "Embedding", "Flatten", "GlobalAveragePooling1D", "GlobalAveragePooling2D",
           "GlobalMaxPooling1D", "GlobalMaxPooling2D", "Input", "InputLayer", "Layer", "MaxPooling2D", "Maximum",
           "Minimum", "Multiply", "Permute", "Pooling2D", "Reshape", "Subtract", "add", "concatenate", "maximum",
           "minimum", "multiply", "subtract"]
