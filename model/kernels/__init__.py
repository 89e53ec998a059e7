"""Kernels and number formats: CPU (oneDNN, TorchScript traces) and GPU (fixed-row products, CUDA graphs) tuning,
float32/bfloat16/int8 and where they run."""
