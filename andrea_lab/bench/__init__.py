"""The benchmarks' laboratory: what writes book/data/bench_*.json and gpucheck.json.

    cli        python -m andrea_lab.bench {head-dim|projections|layout|all|gpu-check|gpu-suite}
    writer     write_results: validate a suite's results, write them atomically (never over
               committed data unless asked)
    gpucheck   correctness of every kernel on a real GPU, JSON out (python -m andrea_lab.bench
               gpu-check); read_report checks a gpucheck.json before it is landed
"""
