"""andrea_lab: the laboratory that makes, writes and re-checks the book's committed data.

Only scripts, tests and the book build's extensions (book/_ext) import it; a chapter never does:
andrea_edu reads committed data through andrea_edu.data, and tests/test_architecture.py fails
on any andrea_edu module that imports this package. It also holds the tooling that runs the
chapters headless and checks their exercises, and the commands' shared plumbing (argument
checks, re-running pinned or unpinned).

    bench       python -m andrea_lab.bench {head-dim|projections|layout|all|gpu-check|gpu-suite}:
                the benchmarks' results JSON (write_results) and the GPU correctness check
    make_sweep  python -m andrea_lab.make_sweep: the toy laboratory's n_head x seed sweep,
                trained in parallel processes (make_runs) and written (save_sweep)
    pipeline_timing  python -m andrea_lab.pipeline_timing: time per step, pipeline_<device>.json
                (save_timing)
    make_realtext_run  python -m andrea_lab.make_realtext_run: the real-text run and the toy
                chapter's model; recheck_losses (--recheck) re-trains the run's first steps in
                a pinned subprocess (the tests compare them with the committed run)
    make_realtext_paths  python -m andrea_lab.make_realtext_paths: the real-text model's path
                ablations
    path_ablation  the instrument behind them: one head's output removed from one later head's
                q, k or v (forward, path_effects, route_effects), measure and recheck
    make_realtext_variant  python -m andrea_lab.make_realtext_variant: the longer real-text
                variants
    make_sass_model  python -m andrea_lab.make_sass_model --out DIR: the SASS counts and time
                model of every kernel version, in one file (the GPU suite's logs; a model)
    run_writers their writers: save_run, save_toy, save_paths, save_variant
    pin_writer  the committed data's pins, written: accept (rewrites andrea_edu/data_pins.py's
                table), own_folder, pin_folder (a test's copy read as book/data)
    process     how a command runs: re-run pinned or unpinned in a child (rerun_pinned,
                rerun_unpinned, run_child), signals passed on, SIGTERM as Ctrl-C
    store       the one manifest writer: write_files_as_unit (temporary file + rename per
                file, SHA256SUMS last: the commit point), write_json_atomic, seal_folder,
                default_out_dir; committed_reason (why writing a path would change committed
                data: every writer asks it); stamped (what only a writer adds to a record's
                provenance: git_commit, code_hash)
    arg_checks  argument checks shared by every command line here and scripts/readme_figure.py,
                run before any work (one line naming the flag, exit status 2)
    execute_chapters  python -m andrea_lab.execute_chapters book/*.ipynb: chapters run headless
                without the ZeroMQ stall, with a per-cell timeout (the book build's extensions
                load its patches)
    verdict_page  one claim, one verdict: every chapter's "Checking the source" rows combined
                for the verdicts page (group_claims, combine; read by book/_ext/andrea_verdicts.py)
    chapter_exercises  python -m andrea_lab.chapter_exercises CHAPTER.ipynb N: a chapter's
                exercises as one-cell changes, run on only the cells they reach (the tests run
                every one)
"""
