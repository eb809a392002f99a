#!/usr/bin/env bash
# The GPU measurements of issue 36, one short run (about 3-6 minutes on one H200):
#   1. torch_watch.py: optimizer.step() of GPT-2 small (124 M weights, Adam) bare, with
#      `watch` on a logged and on a non-logged step, with histograms, and the usual alternatives;
#   2. spectral.py: whole training steps of GPT-2 small (batch 8 x 512 tokens, TF32), bare,
#      Frobenius and spectral logged and non-logged steps, and a check of one logged step's
#      ratios of both metrics against float64;
#   3. trainers.py: the Hugging Face Trainer with fsdp="full_shard" in this one process (one
#      rank): the callback's ratios checked against the full parameters' under FSDP versions
#      1 and 2, then bare / callback / watch by hand, logged and non-logged, timed.
# Each part runs under its own time limit, so that one failure leaves the others their time.
#
#   PYTHONPATH=. benchmarks/gpu.sh           # on a CUDA machine, from the repository root
#   PYTHONPATH=. benchmarks/gpu.sh --smoke   # the same parts on the CPU, tiny sizes (no FSDP)
set -u
python=${PYTHON:-python3}
here=$(dirname "$0")
failed=0

part() {  # part LIMIT_SECONDS COMMAND...: run COMMAND, killed after LIMIT_SECONDS
  local limit=$1
  shift
  echo "=== $(date -u +%H:%M:%S) (limit ${limit} s): $*"
  timeout -k 10 "$limit" "$@"
  local status=$?
  if [ "$status" -ne 0 ]; then
    echo "=== FAILED (exit status $status): $*"
    failed=1
  fi
}

if [ "${1:-}" = "--smoke" ]; then
  part 120 "$python" "$here/torch_watch.py" --device cpu --workloads GPT2 --smoke
  part 180 "$python" "$here/spectral.py" --frameworks torch --model gpt2 --device cpu --check --smoke
  part 240 "$python" "$here/trainers.py" --device cpu --model tiny --trainers hf --check --smoke
else
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,utilization.gpu --format=csv
  "$python" -c "import torch, transformers, accelerate; print('torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__, torch.cuda.get_device_name())"
  part 80 "$python" "$here/torch_watch.py" --device cuda --workloads GPT2
  part 120 "$python" "$here/spectral.py" --frameworks torch --model gpt2 --device cuda --check
  part 200 "$python" "$here/trainers.py" --device cuda --model small --trainers hf --fsdp --check --repeats 3 --steps 40
fi
echo "=== $(date -u +%H:%M:%S) done; a part failed: $failed"
exit "$failed"
