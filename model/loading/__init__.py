"""Loading: checkpoints from a directory or the Hub, their configs, languages, and the bundle that holds a loaded
model with its tokenizer."""
