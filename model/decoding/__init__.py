"""Decoding on the network: the searches (greedy, sampling, beam, constrained), the rules on each step's logits,
the batch decoder that steps many requests together, glossaries and word alignments."""
