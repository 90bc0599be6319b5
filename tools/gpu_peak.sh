# shellcheck shell=bash
# Sourced by the GPU benchmarks: peak_tflops NAME DTYPE prints the dense
# peak TFLOP/s of one GPU named NAME (nvidia-smi's name) for DTYPE (bf16
# or fp32), from NVIDIA's data sheets (SXM where both exist, no
# sparsity), or from PEAK_TFLOPS ("bf16=989,fp32=67") when it is set;
# nothing when neither knows it (MFU is then n/a). fp32 is the
# non-tensor-core figure: tprun's fp32 schedules run cuBLAS without TF32.
peak_tflops() {   # name dtype
    local name="$1" dt="$2" spec="${PEAK_TFLOPS:-}"
    if [[ -n "$spec" ]]; then
        echo "$spec" | tr ',' '\n' | sed -n "s/^$dt=//p" | head -1
        return
    fi
    case "$name:$dt" in
        *H100*PCIe*:bf16) echo 756 ;;  *H100*PCIe*:fp32) echo 51 ;;
        *H100*:bf16|*H200*:bf16|*H800*:bf16) echo 989 ;;
        *H100*:fp32|*H200*:fp32|*H800*:fp32) echo 67 ;;
        *A100*:bf16|*A800*:bf16) echo 312 ;;  *A100*:fp32|*A800*:fp32) echo 19.5 ;;
        *L40S*:bf16) echo 362 ;;  *L40S*:fp32) echo 91.6 ;;
        *A10*:bf16) echo 125 ;;   *A10*:fp32) echo 31.2 ;;
        *L4*:bf16) echo 121 ;;    *L4*:fp32) echo 30.3 ;;
        *) echo "" ;;
    esac
}
