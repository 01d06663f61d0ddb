"""Heads that specialize (Part "Heads": "Why heads specialize", "Why twelve heads, not one wider
head").

    batch              the one labelled batch both laboratories build (and the measures read)
    corpus             the toy laboratory: sequences built to hold three patterns, every
                       position labelled (previous token, matching bracket, recent entity)
    run                one training run of either laboratory: the settings both share, the one
                       training loop (fit), the record (losses, scores, baseline, ablation,
                       each lab's extras), its JSON
    training           train a small ANDREA on it on the CPU, deterministically
    measures           what each head does, in either laboratory: pattern scores, losses,
                       the uniform baseline, ablation, solo values, label counts
    toy_calls          the toy's reading of them: pattern names, floors, the detection
                       threshold and its margin ("above", "at the threshold", "below")
    per_head           read off each head's own weights: gradient and parameter norms,
                       output correlations, the heads' outputs before W_O
    gradient_pressure  do redundant heads receive smaller gradients?
    verdict_words      the verdict words every rating of a claim answers in (the box shows them)
    sweep              n_head x seeds at a fixed parameter count (made by python -m andrea_lab.make_sweep)
    chapter_run        the chapter's main run read from the sweep and its committed weights,
                       re-checked live (the book build does not train its 1,500 steps)
    experiments        the chapter's exercises, one knob each: another corpus, a head and its
                       copy trained on, one-line reports on a head and a pattern
    two_places         why one softmax cannot attend to two places at once
  Heads on real text (chapter "Heads on real text"):
    text_corpus        the Python standard library's own source as a corpus, parser-made labels
    text_training      a small ANDREA trained on it on the CPU, committed with provenance
    text_runs          a real-text run's settings and files (validated loads)
    detectors          real text's verdicts: each pattern's best head against 5x uniform
    circuits           QK = W_Q^h W_K^h^T (where a head looks), OV = W_V^h W_O[h] (what it writes)
    gpt2               GPT-2's weights in AndreaModel (transformers state dict or safetensors file)
  Circuits across layers (chapter "Heads on real text", last sections):
    composition        Q-, K-, V-composition of layer-0 and layer-1 heads, against random matrices
    paths              path ablation: one head's output removed from one later head's q, k or v
    path_runs          the real-text model's path ablations, committed, validated, re-checked
    induction          induction score, prefix-matching and copying signatures, second-copy loss;
                       the recent-identifier pattern read as the source states it
    text_longer        more real-text runs (a 256-character context, 3 layers)
  A trained model (chapter "Why heads specialize"), the subpackage trained/: all-MiniLM-L6-v2
  found offline and hash-checked (weights), run on the book's projections and attention()
  (encoder), its probe sentences (probes), the three patterns against uniform, random-init and
  held-out baselines (patterns), head ablations and W_O per head (ablation), a real layer through
  the kernels' emulators (on_kernels).
"""
