// parallel/pipeline_schedule.h: pipeline schedules as data (notes/design.md, "Pipeline
// schedules are data"), their simulation, and the closed forms of their bubble.
//
// Pipeline parallelism cuts the layers into model stages and the step's batch into m
// microbatches; each of the p pp ranks holds one or more stages (its chunks) and runs, in a
// fixed order, actions on them:
//   F(i, c)  forward of microbatch i on chunk c: receives the activation of the previous
//            model stage, sends its output activation to the next one;
//   B(i, c)  backward: receives the output gradient from the next model stage, sends the
//            input gradient to the previous one. A split B (zero-bubble schedules) is only the
//            input gradient, and
//   W(i, c)  the weight gradient of that microbatch, which needs no communication.
// Where the model stages live (the placement, placement_of):
//   looped       chunk c of rank r is model stage s = c p + r (Megatron's; v chunks, 1 without
//                interleaving): F goes r -> r + 1 within a chunk and p - 1 -> 0 between chunks.
//   v            2p stages, rank r holds stages r and 2p - 1 - r (Qi et al. 2024 §6's ZB-V,
//                DualPipeV): the first and the last stage share rank 0, the middle two rank
//                p - 1, whose hand-over from stage p - 1 to p is local (no message).
//   mirrored     DualPipe (DeepSeek-V3 report §3.2.1): p stages and two copies of the model;
//                rank r holds stages r and p - 1 - r (chunk 0 the lower, chunk 1 the higher),
//                the first m/2 microbatches go down ranks 0 .. p - 1 and the others up ranks
//                p - 1 .. 0, so stage s of microbatch i runs on rank s or p - 1 - s. Ranks r
//                and p - 1 - r hold the same stages and sum their gradients.
// Every message is one b s h tensor (N_l h under sequence parallelism).
//
// One list per rank drives everything: the executor runs it (posting exchanges() between
// actions), simulate() predicts the bubble from per-action costs, report/timeline
// draws it. Schedules (p ranks, m microbatches, v chunks per rank):
//   gpipe        all F, then all B (GPipe, Huang et al. 2019): every rank holds m.
//   1f1b         warm-up p - r - 1 forwards, steady one F one B, cool-down B (PipeDream-
//                Flush; Narayanan et al. SC21 §2.2): rank r holds min(p - r, m).
//   interleaved  Megatron's 1F1B over v chunks (Narayanan et al. SC21 §2.2.2): forwards in
//                groups of p microbatches per chunk, warm-up (p - r - 1) 2 + (v - 1) p
//                chunk-forwards (all v m when m == p, as Megatron); needs m % p == 0.
//   zb-h1        1F1B with B and W split (Qi et al., ICLR 2024, "Zero Bubble Pipeline
//                Parallelism", §3.1): rank r runs at slot x the tuple F_x, B_{x-(p-1-r)},
//                W_{x-(p-1)}: W lags B by r microbatches and fills the cool-down; it holds
//                min(p - r, m) microbatches between F and B, as 1F1B.
//   zb-v         the V placement with every B split (Qi et al. §6), as PyTorch writes it
//                (torch.distributed.pipelining ScheduleZBVZeroBubble): warm-up 2(p - r) - 1
//                F of chunk 0, r pairs F1 F0, p - r triples F1 B1 W1; steady F0 B0 W0 F1 B1 W1;
//                cool-down r pairs B0 B1, p - r pairs B0 W0, the W's left. Any m (PyTorch
//                drops the actions of microbatches >= m from the list for max(m, 2p - 1)).
//   dualpipev    the V placement in DeepSeek's eight steps (deepseek-ai/DualPipe dualpipev.py;
//                PyTorch's ScheduleDualPipeV): nF0, nF0F1, nB1W1F1, the main nF0B1F1B0 whose
//                F and B pairs (F&B) overlap on a GPU, nB1F1B0, nB1B0, nWB0, nW; some B split
//                (their W from a FIFO queue), some whole. Needs m >= 2p.
//   dualpipe     the same eight steps on the mirrored placement (dualpipe.py), by half rank
//                min(r, p - 1 - r); needs p even, m even and m >= 2p.
// Bubble (notes/formulas.md; idle time of a rank with zero communication time):
//   gpipe, 1f1b: (p-1)/(m+p-1) of the step, (p-1)/m of the ideal time m(T_F + T_B)
//   interleaved: (p-1)/(v m) of the ideal time
//   zb-h1: (p-1)(T_F + T_B - T_W) per rank, against 1f1b's (p-1)(T_F + T_B + T_W)
//   zb-v: (p-1) max(T_B, 2(T_B - T_W)) per rank, T_* of one chunk, derived for this list
//         (where T_F, T_W <= T_B and m >= 2p - 1); Qi et al. §6's zero bubble at T_F = T_B =
//         T_W is their searched schedule's, this fixed one idles (p-1) T there
//   dualpipe: (p/2 - 1)(T_F&B + T_Bfull - 3T_W), dualpipev (p - 1)(...) per rank (DeepSeek-V3
//         report Table 2; DualPipe README), T_F&B the overlapped pair (T_F + T_Bfull on a CPU,
//         which cannot overlap them); the simulation of the lists idles no more than that
//         (where T_F <= T_B)
// Pure: no MPI, no kernels, no model.
//
// defines: PipelineSchedule, schedule_name, parse_schedule_name, StagePlacement,
//          placement_of, PipelineShape, check_pipeline_shape, StageSplit,
//          pipeline_stage_layers, ActionType, Message, Action, Schedule, make_schedule,
//          check_schedule, forward_only_schedule, Exchange, exchanges, check_exchanges,
//          gradient_buffers,
//          has_split_backward, ActionCosts, ActionTiming, Simulation, simulate,
//          summarize_idle, BubbleClosedForm, bubble_closed_form, action_label
#pragma once
#include <string>
#include <vector>

namespace paralab {

enum class PipelineSchedule { GPIPE, ONE_F_ONE_B, INTERLEAVED, ZB_H1, ZB_V, DUALPIPE_V, DUALPIPE };
// "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev", "dualpipe"
const char* schedule_name(PipelineSchedule s);
bool parse_schedule_name(const std::string& name, PipelineSchedule* out);

enum class StagePlacement { LOOPED, V, MIRRORED };
StagePlacement placement_of(PipelineSchedule s);

struct PipelineShape {
  PipelineSchedule kind = PipelineSchedule::ONE_F_ONE_B;
  int p = 1;  // pp ranks
  int m = 1;  // microbatches per step
  int v = 1;  // model chunks per rank: interleaved's virtual stages, 2 for zb-v and the
              // DualPipes, else 1
  StagePlacement placement() const { return placement_of(kind); }
  // p v; DualPipe's p (its two chunks are copies of the same p stages)
  int model_stages() const;
  // Model stage of chunk c on rank r (the placement in the header comment).
  int stage_of(int rank, int chunk) const;
  // The rank that runs model stage s for microbatch i, and which of its chunks that is.
  int rank_of(int stage, int microbatch) const;
  int chunk_of(int stage) const;
  // DualPipe: the rank holding the same two stages (the mirror), else the rank itself.
  int mirror_of(int rank) const {
    return placement() == StagePlacement::MIRRORED ? p - 1 - rank : rank;
  }
};

// "" when the shape can be scheduled, else why not (p, m, v >= 1; interleaved needs p >= 2,
// v >= 2 and m % p == 0; zb-v, dualpipev and dualpipe need p >= 2 and v == 2, the DualPipes
// m >= 2p, dualpipe p and m even; the other schedules need v == 1).
std::string check_pipeline_shape(const PipelineShape& s);

// How Megatron splits the layers over the stages when not evenly (--decoder-first/last-
// pipeline-num-layers, --account-for-embedding/loss-in-pipeline-split; Megatron-Core's
// get_num_layers_to_build): first/last the layers of pp rank 0 / p - 1 (0: not given), the
// other ranks the rest evenly; or with embedding/loss the embedding and the loss each count
// as one layer, L + e + l split evenly over the ranks, and the first (last) model stage
// builds one layer fewer. Not both kinds at once (Megatron's assert).
struct StageSplit {
  int first = 0, last = 0;
  bool embedding = false, loss = false;
  bool uneven() const { return first > 0 || last > 0 || embedding || loss; }
};

// Layers of each model stage (size model_stages()), in model order. A rank's layers split
// evenly over its chunks (DualPipe: the ranks of copy 0, rank r holding stage r). Throws
// std::invalid_argument when they do not add up or do not divide.
std::vector<int> pipeline_stage_layers(int num_layers, const PipelineShape& shape,
                                       const StageSplit& split = {});

enum class ActionType { F, B, W };

// One point-to-point tensor between two model stages.
struct Message {
  enum Kind { ACTIVATION, GRADIENT } kind = ACTIVATION;
  int microbatch = 0;
  int from_stage = 0, to_stage = 0;  // model stages
  int from_rank = 0, to_rank = 0;    // pp ranks (PipelineShape::rank_of)
  // Posted by the timeline (exchanges()): the global step both ranks post it at, the slot
  // its rank posts it before (the sender's copy in Action::sends, the receiver's in
  // Action::recvs; the rank's slot count: after its last slot), and its place in the global
  // order. step -1: the slot rule.
  int step = -1, before_slot = -1, order = 0;
  // Between two chunks of one rank (the V's turn): handed over in memory, no exchange.
  bool local() const { return from_rank == to_rank; }
  bool operator==(const Message& o) const {
    return kind == o.kind && microbatch == o.microbatch && from_stage == o.from_stage &&
           to_stage == o.to_stage && from_rank == o.from_rank && to_rank == o.to_rank;
  }
};

struct Action {
  ActionType type = ActionType::F;
  int microbatch = 0;
  int chunk = 0;  // on this rank, 0..v-1
  int stage = 0;  // model stage: PipelineShape::stage_of(rank, chunk)
  int slot = 0;   // the rank's slot: its exchange comes before it (see exchanges())
  // B: only the input gradient, its W later (zero-bubble schedules); a whole B otherwise.
  bool split = false;
  // DualPipe's F&B: the F and the B of an overlapped pair (one slot). A CPU runs them one
  // after the other; on a GPU each one's communication hides under the other's compute.
  bool overlapped = false;
  // Implied communication: what must arrive before it runs (F: the previous stage's
  // activation; B: the next stage's gradient), and what it produces for a neighbour.
  std::vector<Message> recvs, sends;
};

struct Schedule {
  PipelineShape shape;
  std::vector<std::vector<Action>> ranks;  // per pp rank, in execution order
};

// Throws std::invalid_argument when check_pipeline_shape fails.
Schedule make_schedule(const PipelineShape& shape);

// Whether any B of the schedule is split (it has W actions).
bool has_split_backward(const Schedule& s);

// "" when every model stage runs exactly one F and one B (and one W when that B is split) of
// every microbatch, on the rank the placement names, F before B before W, and a local
// gradient is used by the rank's next B (the single receive buffer holds it); else the
// first problem found.
std::string check_schedule(const Schedule& s);

// The executor's communication discipline: a rank's actions fall in slots, one action each,
// except where two share one (interleaved's steady state F and B, Megatron's
// send_forward_backward_recv_forward_backward, one action per slot deadlocks there; DualPipe's
// overlapped F&B). Between slots a rank posts batched send/recvs (Communicator::send_recv),
// its exchanges, each waited for before the next; after its last slot, the last ones.
// Megatron's slot rule: exchange j, before slot j, holds the sends of slot j - 1 and the
// receives of slot j (slots + 1 exchanges, an empty one skipped: no call). The V and mirrored
// schedules' lists deadlock under it (their sources post asynchronously), so make_schedule
// posts each of their messages by one global timeline instead, as PyTorch's _add_send_recv
// orders a schedule's sends and receives by one simulated pass over all ranks: the
// simulation at the plan's unit costs gives every message a time, an activation the start of
// the F that reads it, a gradient the end of the B that makes it (sent before the next B
// overwrites it; it may arrive long before its B, in one of the rank's gradient buffers,
// gradient_buffers()). Every distinct time is one step, and a rank posts each step it takes
// part in as one exchange, before its first slot that starts at or after that time. Every
// rank then passes the steps in one order, so the blocking exchanges complete (by induction
// on the step) and each pair of ranks posts its transfers in one order. Local messages are
// in no exchange.
struct Exchange {
  std::vector<Message> sends, recvs;
  int before_slot = 0;  // the rank's slot count: after its last slot
  bool empty() const { return sends.empty() && recvs.empty(); }
};
std::vector<Exchange> exchanges(const Schedule& s, int rank);

// "" when (1) per ordered pair of ranks the k-th send of one is the k-th receive of the
// other (matching in posting order, as NCCL and untagged MPI do), (2) the exchanges
// complete when every transfer is a rendezvous (a send finishes only when its receive is
// posted, and an exchange only when all its transfers did): no deadlock, and (3) every
// message is sent after the action making it and received before the one reading it, a B's
// input gradient before the rank's next B overwrites it. Else what hangs or what is
// overwritten.
std::string check_exchanges(const Schedule& s);

// The gradients a rank holds received (or handed over) and not yet read by their B, at the
// most: the receive buffers it keeps (the slot rule: 1; 0 on a rank no gradient comes back
// to).
int gradient_buffers(const Schedule& s, int rank);

// Evaluation's forward-only schedule: each rank's F actions of `s`, in its order, one a
// slot (their activation messages unchanged). It is every F of the training schedule with
// the B and W taken out, so F(i) of stage s still follows F(i) of s - 1 on every rank;
// check_exchanges proves it runs (tests/test_pipeline_schedule.cpp, every shape).
Schedule forward_only_schedule(const Schedule& s);

// Per-action cost in arbitrary units (the plan: F = 1, B = 2, W = 1; the executor: the
// measured averages). A whole (not split) B costs B + W. comm: time from a send to the
// matching receive across ranks (a local hand-over costs nothing).
struct ActionCosts {
  double F = 1, B = 2, W = 1;
  double comm = 0;
  // Optional per model stage (size model_stages()): overrides F, B, W for that stage.
  std::vector<double> stage_F, stage_B, stage_W;
  // Optional per model stage: the part of its F and of its (input-gradient) B that is
  // communication inside the layers (tp, cp, ep collectives). An overlapped F&B pair
  // (Action::overlapped) hides each half's under the other half's compute: a half costs
  // its compute + max(0, its communication - the other half's compute).
  std::vector<double> stage_F_comm, stage_B_comm;
  // cost of a alone; with its overlapped partner given, its share of the pair
  double cost(const Action& a, const Action* partner = nullptr) const;
};

struct ActionTiming {
  double start = 0, end = 0;
};

struct Simulation {
  bool deadlock = false;
  std::string blocked;  // deadlock: the first action of each stuck rank
  std::vector<std::vector<ActionTiming>> timing;  // [rank][k], as Schedule::ranks
  double step_time = 0;                           // last end over all ranks
  std::vector<double> busy, idle;                 // per rank; idle = step_time - busy
  double bubble = 0;           // sum idle / (ranks x step_time): the fraction of the step
  double bubble_vs_ideal = 0;  // sum idle / sum busy: relative to the time without bubble
  // Per rank, peak (microbatch, chunk) pairs whose activations are held: F done, B not yet
  // (order-based, so exact for any costs). held_until_w: F done, and W not yet after a
  // split B (W still reads the inputs of the weight GEMMs and their output gradients).
  std::vector<int> peak_held, peak_held_until_w;
};

// Runs every rank's list in order, each action as soon as the rank is free and its inputs
// exist: F(i) of stage s after F(i) of s - 1; B(i) of s after F(i) of s and B(i) of s + 1;
// W(i) after B(i). whole_slots: a slot of two actions starts when both have their inputs (as
// the executor runs it; without, each half on its own, the papers' view of a pair). An
// action that can never run is a deadlock (reported, not thrown).
Simulation simulate(const Schedule& s, const ActionCosts& costs = {}, bool whole_slots = false);
// From busy and step_time (each rank's time inside its actions, the longest run): idle per
// rank, bubble and bubble_vs_ideal. simulate ends with it; so does a measured timeline
// (report/rank_report.h).
void summarize_idle(Simulation& sim);

// The published bubble of the shape's schedule (header comment) for the costs' F, B, W.
struct BubbleClosedForm {
  double of_step = 0;   // idle / step time
  double vs_ideal = 0;  // idle / busy time
  std::string formula;  // as printed, e.g. "(p-1)/(m+p-1)"
};
BubbleClosedForm bubble_closed_form(const PipelineShape& s, const ActionCosts& costs = {});

// "F3", or with chunks "F3b" (chunk letter a, b, ...), as the timeline prints it.
std::string action_label(const Action& a, int v);

}  // namespace paralab
