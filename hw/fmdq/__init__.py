"""The FMDQ datapath (spec section 7.2, ``encoding = "fmdq"``): the quantization unit, the
SIMD-4 2b x 8b PE array and the stream layouts between them."""
