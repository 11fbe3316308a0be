"""The codecs of the quantized K/V formats (:mod:`snapstream_core.policies.kv_format`): FP8 E4M3 (:mod:`.fp8`) and
KIVI's 2/4-bit groups (:mod:`.kivi`). Functions of tensors only; the cache layers and the engine's rows call them."""
