"""The network: the architecture as data, its layers, positions, the KV cache and the encoder-decoder itself."""
