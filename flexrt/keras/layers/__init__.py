"""FlexFlow's ``flexflow.keras.layers``: the Keras layers, each lowering to FFModel layers at compile.

Entry points: ``Input``, ``Dense``, ``Conv2D``, ``MaxPooling2D``, ``AveragePooling2D``, ``Flatten``,
``Activation``, ``Dropout``, ``BatchNormalization``, ``LayerNormalization``, ``Embedding``, ``Reshape``,
``Permute``, ``Conv2DTranspose``, ``DepthwiseConv2D``, ``SeparableConv2D``, ``UpSampling2D``,
``ZeroPadding2D``, ``Rescaling``, ``ReLU``, ``LeakyReLU``, ``ELU``, ``Softmax``, ``Conv1D``,
``MaxPooling1D``, ``AveragePooling1D``, ``LSTM``, ``GRU``, ``SimpleRNN``, ``Bidirectional``,
``TimeDistributed``, the merge layers and their functions, ``Layer``. Keras layers flexrt does not
have (``Lambda``, ``Conv3D``, ...) raise ``MissingLayerError`` when looked up, imported or not: a
``NotYetAvailableError`` naming the layer and listing the layers there are.
"""

from flexrt.errors import NotYetAvailableError
from flexrt.keras.layers.activations import ELU, LeakyReLU, ReLU, Rescaling, Softmax
from flexrt.keras.layers.base_layer import Layer
from flexrt.keras.layers.convolutional import Conv2D, DepthwiseConv2D, SeparableConv2D
from flexrt.keras.layers.convolutional1d import AveragePooling1D, Conv1D, MaxPooling1D
from flexrt.keras.layers.core import Activation, Dense, Dropout, Embedding, Flatten, Permute, Reshape
from flexrt.keras.layers.input_layer import Input, InputLayer
from flexrt.keras.layers.merge import (Add, Average, Concatenate, Maximum, Minimum, Multiply, Subtract, add, average,
                                       concatenate, maximum, minimum, multiply, subtract)
from flexrt.keras.layers.normalization import BatchNormalization, LayerNormalization
from flexrt.keras.layers.resampling import Conv2DTranspose, UpSampling2D, ZeroPadding2D
from flexrt.keras.layers.recurrent import GRU, LSTM, Bidirectional, SimpleRNN
from flexrt.keras.layers.wrappers import TimeDistributed
from flexrt.keras.layers.pool import (AveragePooling2D, GlobalAveragePooling1D, GlobalAveragePooling2D,
                                      GlobalMaxPooling1D, GlobalMaxPooling2D, MaxPooling2D, Pooling2D)

__all__ = ["Activation", "Add", "Average", "AveragePooling1D", "AveragePooling2D", "BatchNormalization",
           "Bidirectional", "Concatenate", "Conv1D", "Conv2D", "Conv2DTranspose", "Dense", "DepthwiseConv2D",
           "Dropout", "ELU", "Embedding", "Flatten", "GRU", "GlobalAveragePooling1D", "GlobalAveragePooling2D",
           "GlobalMaxPooling1D", "GlobalMaxPooling2D", "Input", "InputLayer", "LSTM", "Layer", "LayerNormalization",
           "LeakyReLU", "MaxPooling1D", "MaxPooling2D", "Maximum", "Minimum", "Multiply", "Permute", "Pooling2D",
           "ReLU", "Rescaling", "Reshape", "SeparableConv2D", "SimpleRNN", "Softmax", "Subtract", "TimeDistributed",
           "UpSampling2D", "ZeroPadding2D", "add", "average", "concatenate", "maximum", "minimum", "multiply",
           "subtract"]


class MissingLayerError(NotYetAvailableError, ImportError):
    """A Keras layer flexrt.keras does not have, looked up by name (``layers.Lambda``, or ``from
    flexrt.keras.layers import Lambda``, which shows this message rather than Python's "cannot import
    name"; not an AttributeError: ``hasattr(layers, 'Lambda')`` raises it too)."""


# Keras layers flexrt.keras does not have: a lookup says so and lists what there is (a plain
# AttributeError named nothing)
KERAS_ONLY = frozenset((
    "Conv3D", "SeparableConv1D", "DepthwiseConv1D", "Conv1DTranspose",
    "Conv3DTranspose", "RNN", "ConvLSTM2D",
    "LSTMCell", "GRUCell", "SimpleRNNCell", "MaxPooling3D", "AveragePooling3D",
    "GlobalMaxPooling3D", "GlobalAveragePooling3D", "Cropping1D", "Cropping2D", "Cropping3D", "UpSampling1D",
    "UpSampling3D", "ZeroPadding1D", "ZeroPadding3D", "Lambda", "Masking", "RepeatVector", "Attention",
    "AdditiveAttention", "MultiHeadAttention", "GroupNormalization", "UnitNormalization", "Normalization",
    "Resizing", "CenterCrop", "RandomFlip", "RandomRotation", "RandomZoom", "RandomCrop",
    "RandomTranslation", "RandomContrast", "TextVectorization", "StringLookup", "IntegerLookup", "CategoryEncoding",
    "Hashing", "Discretization", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "GaussianNoise",
    "GaussianDropout", "AlphaDropout", "ActivityRegularization", "PReLU", "ThresholdedReLU", "Dot", "Identity",
    "EinsumDense", "Wrapper", "CuDNNLSTM", "CuDNNGRU"))


def __getattr__(name: str):
    if name in KERAS_ONLY:
        raise MissingLayerError(f"flexrt.keras.layers has no {name}: Keras' {name} is not available in flexrt's "
                                f"Keras (FlexFlow's Keras API and more); its layers: {', '.join(sorted(__all__))}")
    raise AttributeError(f"module 'flexrt.keras.layers' has no attribute {name!r}")
