"""String kernels, TfIdfVectorizer and ai.onnx.ml kernels against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

from lite.errors import InputValueError
from tests.lite.ops._checks_domains import check, normal, rng, run_kernel

ML = "ai.onnx.ml"


def strings(*values):
    return np.array(values, dtype=object)


@pytest.mark.parametrize("x,y", [
    (strings("abc", "de"), strings(".com", "")),
    (strings("cat", "dog"), strings("s")),
    (np.array("a", dtype=object), np.array("b", dtype=object)),
])
def test_string_concat(x, y):
    check("StringConcat", [x, y], opset=20)


def test_string_concat_accepts_bytes():
    (result,) = run_kernel("StringConcat", [strings(b"ab", "c"), strings("d", b"\xc3\xa9")], opset=20)
    assert result.tolist() == ["abd", "cé"]


@pytest.mark.parametrize("attributes", [{}, {"delimiter": "-"}, {"delimiter": "-", "maxsplit": 1}, {"maxsplit": 1}])
def test_string_split(attributes):
    x = strings("a-b--c", " one  two three ", "", "x").reshape(2, 2)
    check("StringSplit", [x], attributes, opset=20, output_count=2)


@pytest.mark.parametrize("pattern", [r"[a-z]+\d*", r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)"])
def test_regex_full_match(pattern):
    x = strings("abc12", "ABC", "me@gmail.com", "x@yahoo.com!").reshape(2, 2)
    check("RegexFullMatch", [x], {"pattern": pattern}, opset=20)


@pytest.mark.parametrize("attributes", [
    {},
    {"stopwords": ["monday"], "case_change_action": "UPPER"},
    {"stopwords": ["Monday"], "is_case_sensitive": 1, "case_change_action": "LOWER"},
])
@pytest.mark.parametrize("two_d", [False, True])
def test_string_normalizer(attributes, two_d):
    x = strings("Monday", "tuesday", "monday", "Wednesday")
    check("StringNormalizer", [x.reshape(1, -1) if two_d else x], attributes, opset=10)


@pytest.mark.parametrize(("op_type", "inputs", "opset"), [
    ("StringNormalizer", [strings("ok", b"A\xff")], 10),
    ("StringConcat", [strings("a"), strings(b"\xc3")], 20),
    ("RegexFullMatch", [strings(b"\xffx")], 20),
], ids=["normalizer", "concat-second-input", "regex"])
def test_bytes_that_are_not_utf8_are_the_callers_error_naming_input_and_element(op_type, inputs, opset):
    """A BYTES tensor a client sent a string model: InputValueError (a server answers
    INVALID_ARGUMENT), not a UnicodeDecodeError (which a server answers INTERNAL)."""
    attributes = {"pattern": "x"} if op_type == "RegexFullMatch" else {}
    with pytest.raises(InputValueError, match=r"input (X|Y) element \[\d\] is not UTF-8 text"):
        run_kernel(op_type, inputs, attributes, opset=opset)


def test_string_normalizer_all_dropped():
    (result,) = run_kernel("StringNormalizer", [strings("a", "A").reshape(1, 2)], {"stopwords": ["a"]}, opset=10)
    assert result.shape == (1, 1) and result[0, 0] == ""


TFIDF = {"ngram_counts": [0, 4], "ngram_indexes": [0, 1, 2, 3, 4, 5, 6],
         "pool_int64s": [2, 3, 5, 4, 5, 6, 7, 8, 6, 7]}


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("grams,skip", [((1, 1), 0), ((2, 2), 0), ((1, 2), 3)])
@pytest.mark.parametrize("two_d", [False, True])
def test_tf_idf_vectorizer(mode, grams, skip, two_d):
    x = rng.integers(2, 9, (2, 8) if two_d else (10,)).astype(np.int32)
    attributes = dict(TFIDF, mode=mode, min_gram_length=grams[0], max_gram_length=grams[1], max_skip_count=skip)
    if mode != "TF":
        attributes["weights"] = [0.5, 1.0, 2.0, 1.5, 1.0, 3.0, 0.25]
    check("TfIdfVectorizer", [x], attributes, opset=9)


def test_tf_idf_vectorizer_strings():
    x = strings("a", "b", "a", "c", "b", "a").reshape(2, 3)
    attributes = {"mode": "TF", "min_gram_length": 1, "max_gram_length": 2, "max_skip_count": 0,
                  "ngram_counts": [0, 2], "ngram_indexes": [0, 1, 2], "pool_strings": ["a", "b", "a", "b"]}
    check("TfIdfVectorizer", [x], attributes, opset=9)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_binarizer(dtype):
    check("Binarizer", [(normal(3, 4) * 3).astype(dtype)], {"threshold": 0.5}, opset=1, domain=ML)


@pytest.mark.parametrize("shape", [(5,), (3, 5), (2, 3, 5)])
def test_array_feature_extractor(shape):
    check("ArrayFeatureExtractor", [normal(*shape), np.array([4, 0, 2], dtype=np.int64)], opset=1, domain=ML)


@pytest.mark.parametrize("attributes,x", [
    ({"keys_strings": ["a", "b"], "values_int64s": [1, 2], "default_int64": 7}, strings("a", "c", "b")),
    ({"keys_int64s": [3, 4], "values_strings": ["three", "four"]}, np.array([4, 5, 3], dtype=np.int64)),
    ({"keys_floats": [0.5, 1.5], "values_floats": [1.0, 2.0]}, np.array([0.5, 1.5, 3.0], np.float32)),
    ({"keys_tensor": np.array([1, 2], dtype=np.int64), "values_tensor": np.array([0.1, 0.2], dtype=np.float32),
      "default_tensor": np.array([9.0], dtype=np.float32)}, np.array([[2, 3], [1, 1]], dtype=np.int64)),
])
def test_label_encoder(attributes, x):
    check("LabelEncoder", [x], attributes, opset=4, domain=ML)


def test_label_encoder_nan_key_matches_every_nan():
    # The spec's rule; onnx.reference looks NaN up by identity and misses it.
    attributes = {"keys_floats": [0.5, float("nan")], "values_int64s": [1, 2]}
    (result,) = run_kernel("LabelEncoder", [np.array([np.nan, 0.5, 3.0], np.float32)], attributes, opset=4,
                           domain=ML)
    assert result.tolist() == [2, 1, -1]


def tree_attributes(**overrides):
    # Two trees over 2 features and 2 targets: tree 0 splits twice, tree 1 is one leaf.
    attributes = {
        "n_targets": 2, "tree_roots": [0, 2],
        "nodes_featureids": [0, 1, 0], "nodes_modes": np.array([0, 3, 0], dtype=np.uint8),
        "nodes_splits": np.array([0.0, 0.5, 0.0], dtype=np.float32),
        # The one-leaf tree names leaf 2 at node 2: onnx.reference takes the root's index as
        # the leaf, the spec the index both branches name; here they agree.
        "nodes_truenodeids": [0, 1, 2], "nodes_trueleafs": [1, 1, 1],
        "nodes_falsenodeids": [1, 2, 2], "nodes_falseleafs": [0, 1, 1],
        "leaf_targetids": [0, 1, 0, 1, 1], "leaf_weights": np.array([1.0, 2.0, 3.0, 4.0, 5.0], dtype=np.float32),
    }
    attributes.update(overrides)
    return attributes


@pytest.mark.parametrize("aggregate_function", [0, 1, 2, 3])
def test_tree_ensemble(aggregate_function):
    x = normal(6, 2)
    x[0, 0] = np.nan
    check("TreeEnsemble", [x], tree_attributes(aggregate_function=aggregate_function), opset=5, domain=ML)


def test_tree_ensemble_set_membership_and_missing_values():
    attributes = tree_attributes(
        nodes_modes=np.array([6, 3, 0], dtype=np.uint8),
        membership_values=np.array([1.0, 2.0, np.nan], dtype=np.float32),
        nodes_missing_value_tracks_true=[1, 0, 0],
    )
    x = np.array([[1.0, 0.0], [2.0, 1.0], [3.0, 1.0], [np.nan, 0.0]], dtype=np.float32)
    check("TreeEnsemble", [x], attributes, opset=5, domain=ML)
