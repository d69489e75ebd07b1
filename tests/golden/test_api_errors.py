"""The golden model's entry points refuse bad input with a message naming the value or shape
(the bad-input probe's P12-P30), instead of a NumPy message or a silent INT64_MIN code."""

import numpy as np
import pytest

from dstar.golden import attention as A
from dstar.golden.quant import quantize_weights, token_lattice, w8a8_linear
from dstar.golden.softmax import logit_multiplier


@pytest.mark.parametrize("call, named", [
    (lambda: token_lattice(np.ones((1, 2)), -1), "extra_bits .* got -1"),                  # P12
    (lambda: w8a8_linear(np.zeros((1, 8)), *quantize_weights(np.ones((2, 16)))),
     r"got \(1, 8\) and \(16, 2\)"),                                                          # P17
    (lambda: A.quantize_per_token(np.array([[np.nan, 1.0]])), "non-finite value nan"),      # P18
    (lambda: A.quantize_per_token(np.array([[np.inf, 1.0]])), "non-finite value inf"),      # P19
    (lambda: A.quantize_per_token(np.zeros((1, 0))), r"got shape \(1, 0\)"),                # P20
    (lambda: A.quantize_per_head(np.array([[np.nan, 1.0]])), "non-finite value nan"),       # P21
    (lambda: A.quantize_on(np.array([[[np.nan, 1.0]]]), np.array([1.0])), "nan"),           # P22
    (lambda: A.quantize_on(np.array([[[2.0, 1.0]]]), np.array([0.0])), "got 0.0"),          # P23
])
def test_golden_entry_points_name_the_bad_value(call, named):
    with pytest.raises(ValueError, match=named):
        call()


def test_attention_head_refuses_an_empty_head_dimension():                                 # P30
    m, sh = logit_multiplier(np.array(0.01), 6)
    z = np.zeros((8, 0), np.int64)
    with pytest.raises(ValueError, match=r"Dh >= 1, got \(8, 0\)"):
        A.attention_head(z, z, z, m, sh)


def test_good_input_still_quantizes():
    q, s = A.quantize_per_token(np.array([[2.0, -1.0], [0.0, 0.0]]))
    assert q.tolist() == [[127, -64], [0, 0]] and s.tolist() == [2 / 127, 1.0]
