# Sourced by the scripts that produce or re-check committed results (test.sh, build_book.sh):
# pins the CPU instruction sets of torch's numeric libraries to AVX2 before anything imports
# torch, so that CPU results are the same bits on x86-64 CPUs of one vendor (across Intel and
# AMD they differ in the low bits: env.same_cpu_numerics). The same values as
# andrea_edu.env.PINNED_ISA (tests/test_reproducibility.py checks that). A value already set
# wins; ANDREA_CPU_ISA=native, or a CPU that is not x86-64, leaves the libraries free.
case "$(uname -m)" in
  x86_64|amd64)
    if [ "${ANDREA_CPU_ISA:-avx2}" != native ]; then
      export ATEN_CPU_CAPABILITY="${ATEN_CPU_CAPABILITY:-avx2}"
      export MKL_CBWR="${MKL_CBWR:-AVX2,STRICT}"
      export ONEDNN_MAX_CPU_ISA="${ONEDNN_MAX_CPU_ISA:-AVX2}"
    fi ;;
esac
