# tests/mpi/moe_models.sh: the MoE models and run flags moe.sh and expert_parallel.sh share;
# sourced after lib.sh (whose `run` and `work` ref uses), not run.
#   moe, llama, gpt   4 layers (pp 2 x vpp 2): 4 experts of width 24, top-2, aux and z losses
#                     on; llama's experts SwiGLU, gpt's GeLU
#   common            5 steps of 8 microbatches of one sequence (global 8, micro 1)
#   ref NAME FLAGS... the single-rank reference run, once per NAME: the same microbatches
#                     (the aux loss and the capacity are per microbatch)
moe="--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 24 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3"
llama="--arch llama --num-layers 4 --hidden-size 32 --num-attention-heads 4 --num-query-groups 2 --ffn-hidden-size 48 --seq-length 16 --vocab-size 64 $moe"
gpt="--arch gpt --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 $moe"
common="--adam-eps 1e-4 --train-iters 5 --global-batch-size 8 --micro-batch-size 1 --lr 1e-2 --min-lr 1e-3 --lr-warmup-iters 2 --log-interval 100 --report-interval 0 --peak-tflops 1"

ref() {  # name, flags...: one rank, 8 microbatches of 1
  local name=$1; shift
  # shellcheck disable=SC2086
  [ -f "$work/$name.bin" ] || run "$name" 1 "$@" $common ||
    { echo "reference run failed"; cat "$work/$name.log"; exit 1; }
}
