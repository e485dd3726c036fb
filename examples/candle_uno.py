"""CANDLE-Uno as in FlexFlow: 5 feature towers of 8 x 4192, concat, 4 x 4192, 1 output (Unity): 820.9 M parameters.

Source: Unity (OSDI 2022) §6.1, Table 1 (CANDLE-Uno [3], dose-response data, per-GPU batch 256),
built exactly as FlexFlow's example examples/cpp/candle_uno/candle_uno.cc with its built-in
defaults (the configuration Unity's artifact script scripts/osdi22ae/candle_uno.sh runs). Feature
types and widths: dose 1, cell.rnaseq 942, drug.descriptors 5270, drug.fingerprints 2048. Seven
inputs [b, width] in the order of candle_uno.cc's std::map (sorted by name): cell.rnaseq, dose1,
dose2, drug1.descriptors, drug1.fingerprints, drug2.descriptors, drug2.fingerprints. The five
cell/drug inputs each go through their own tower of 8 dense layers of 4192 with ReLU (towers are
not shared between drug1 and drug2, as in candle_uno.cc); the doses pass through unchanged. All
seven are concatenated (5 x 4192 + 2 = 20,962 wide), then 4 dense layers of 4192 with ReLU and a
dense layer of 1 (the predicted growth); no layer has a bias. Unity notes the model exceeds one
GPU's memory; so it does: 820.9 M FP32 parameters.

This script builds the graph and prints it; train it with `flexrt train candle_uno --machine M` (synthetic data).

Run: python examples/candle_uno.py -b 256
"""

from flexrt.core import *

FEATURE_SHAPES = {"dose": 1, "cell.rnaseq": 942, "drug.descriptors": 5270, "drug.fingerprints": 2048}
# input name -> feature type; sorted by input name, as std::map iterates in candle_uno.cc.
INPUT_FEATURES = {
    "cell.rnaseq": "cell.rnaseq",
    "dose1": "dose",
    "dose2": "dose",
    "drug1.descriptors": "drug.descriptors",
    "drug1.fingerprints": "drug.fingerprints",
    "drug2.descriptors": "drug.descriptors",
    "drug2.fingerprints": "drug.fingerprints",
}
DENSE_FEATURE_LAYERS = [4192] * 8
DENSE_LAYERS = [4192] * 4
RELU = ActiMode.AC_MODE_RELU


def has_feature_model(feature_type):
    """candle_uno.cc encodes the feature types whose name starts with "cell." or "drug."."""
    return feature_type.split(".")[0] in ("cell", "drug") and "." in feature_type


def build_model(ffconfig):
    ffmodel = FFModel(ffconfig)
    encoded = []
    for input_name, feature_type in sorted(INPUT_FEATURES.items()):
        t = ffmodel.create_tensor([ffconfig.batch_size, FEATURE_SHAPES[feature_type]], DataType.DT_FLOAT)
        if has_feature_model(feature_type):
            for i, dim in enumerate(DENSE_FEATURE_LAYERS):
                t = ffmodel.dense(t, dim, RELU, use_bias=False, name=f"{input_name}.dense{i}")
        encoded.append(t)
    t = ffmodel.concat(encoded, 1, name="concat")
    for i, dim in enumerate(DENSE_LAYERS):
        t = ffmodel.dense(t, dim, RELU, use_bias=False, name=f"dense{i}")
    ffmodel.dense(t, 1, use_bias=False, name="output")
    return ffmodel


def top_level_task():
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
