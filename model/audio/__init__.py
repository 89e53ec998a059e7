"""Audio in: files decoded to 16 kHz mono samples (decode.py: numpy and soundfile, no torch), and what a speech
model reads of them."""
