"""What the reader sees: one module per chapter, named after its notebook, plus the shared
plotting helpers (viz) and the "Checking the source" box (verdicts). The slider that shows a
figure, and the notebook runner, are tooling: andrea_edu.notebook.

    viz, verdicts               shared by every chapter
    claims                      every claim the book checks, once (the verdicts' registry, read
                                from its data file, data/claims.json)
    provenance                  committed data's provenance, worded for a reader
    three_matrices              "Three matrices per head, or one big matrix"
    parameter_count             "Parameter count" (with "Naming the projections")
    twelve_vectors_become_one   "Twelve vectors become one"
    output_projection           "The output projection W_O"
    why_heads_specialize        "Why heads specialize"
    heads_on_real_text          "Heads on real text (optional deep-dive)"
    head_figures                what those two chapters draw alike: a head's name, the ablation
                                grid, one head's attention on a window with its keys circled
    why_twelve_heads            "Why twelve heads, not one wider head"
    cuda_stores_heads           "How CUDA stores the heads"
    one_kernel_many_heads       "One kernel, many heads"
    kernel_worklog              "From one block per head to FlashAttention: a kernel worklog"
    kernel_source               kernel code shown in a chapter, found in the .cu files by pattern
    config_mirrors_hardware     "The configuration mirrors the hardware"
    final_picture               "The final picture"
    reading_the_pipeline        "Reading the pipeline"

A figures module draws and formats; it computes nothing that a chapter claims. It imports the
computation (andrea_edu.heads, .pipeline, .bench, .kernels) and the core, never the reverse.
"""
