// parallel/pipeline_schedule.h: pipeline schedules as data (notes/design.md, "Pipeline
// schedules are data"), their simulation, and the closed forms of their bubble.
//
// Pipeline parallelism cuts the layers into p stages, one per pp rank, and the step's batch
// into m microbatches. Each rank runs, in a fixed order, actions on its model chunks:
//   F(i, c)  forward of microbatch i on chunk c: receives the activation of the previous
//            model stage, sends its output activation to the next one;
//   B(i, c)  backward: receives the output gradient from the next model stage, sends the
//            input gradient to the previous one. For split schedules (zb-h1) B is only the
//            input gradient, and
//   W(i, c)  the weight gradient of that microbatch, which needs no communication.
// With v virtual chunks per rank (interleaved), chunk c of rank r is model stage
// s = c p + r (Megatron's layout): F goes r -> r + 1 within a chunk and p - 1 -> 0 from one
// chunk to the next. Every message is one b s h tensor (N_l h under sequence parallelism).
//
// One list per rank drives everything: the executor runs it (posting exchanges() between
// actions), simulate() predicts the bubble from per-action costs, report/timeline
// draws it. Schedules (p stages, m microbatches, v chunks):
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
// Bubble (notes/formulas.md; idle time of a rank with zero communication time):
//   gpipe, 1f1b: (p-1)/(m+p-1) of the step, (p-1)/m of the ideal time m(T_F + T_B)
//   interleaved: (p-1)/(v m) of the ideal time
//   zb-h1: (p-1)(T_F + T_B - T_W) per rank, against 1f1b's (p-1)(T_F + T_B + T_W)
// Pure: no MPI, no kernels, no model.
//
// defines: PipelineSchedule, schedule_name, parse_schedule_name, PipelineShape,
//          check_pipeline_shape, pipeline_stage_layers, ActionType, Message, Action,
//          Schedule, make_schedule, check_schedule, forward_only_schedule, Exchange,
//          exchanges, check_exchanges,
//          ActionCosts, ActionTiming, Simulation, simulate, summarize_idle, BubbleClosedForm,
//          bubble_closed_form, action_label
#pragma once
#include <string>
#include <vector>

namespace paralab {

enum class PipelineSchedule { GPIPE, ONE_F_ONE_B, INTERLEAVED, ZB_H1 };
const char* schedule_name(PipelineSchedule s);  // "gpipe", "1f1b", "interleaved", "zb-h1"
bool parse_schedule_name(const std::string& name, PipelineSchedule* out);
inline bool splits_backward(PipelineSchedule s) { return s == PipelineSchedule::ZB_H1; }

struct PipelineShape {
  PipelineSchedule kind = PipelineSchedule::ONE_F_ONE_B;
  int p = 1;  // pipeline stages (pp ranks)
  int m = 1;  // microbatches per step
  int v = 1;  // model chunks per rank (virtual stages); > 1 only for interleaved
  int model_stages() const { return p * v; }
};

// "" when the shape can be scheduled, else why not (p, m, v >= 1; interleaved needs p >= 2,
// v >= 2 and m % p == 0; the other schedules need v == 1).
std::string check_pipeline_shape(const PipelineShape& s);

// Layers of each model stage s = c p + r (size p v), in model order: rank 0 holds `first`
// layers, rank p - 1 `last` (0: not given), the other ranks the rest evenly, and each rank
// splits its layers evenly over its v chunks (Megatron's --decoder-first/last-pipeline-
// num-layers). Throws std::invalid_argument when they do not add up or do not divide.
std::vector<int> pipeline_stage_layers(int num_layers, int p, int v, int first = 0,
                                       int last = 0);

enum class ActionType { F, B, W };

// One point-to-point tensor between two model stages.
struct Message {
  enum Kind { ACTIVATION, GRADIENT } kind = ACTIVATION;
  int microbatch = 0;
  int from_stage = 0, to_stage = 0;  // model stages
  int from_rank = 0, to_rank = 0;    // pp ranks: model stage % p
  bool operator==(const Message& o) const {
    return kind == o.kind && microbatch == o.microbatch && from_stage == o.from_stage &&
           to_stage == o.to_stage;
  }
};

struct Action {
  ActionType type = ActionType::F;
  int microbatch = 0;
  int chunk = 0;  // on this rank, 0..v-1
  int stage = 0;  // model stage: chunk * p + rank
  int slot = 0;   // the rank's slot: its exchange comes before it (see exchanges())
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

// "" when every model stage runs exactly one F and one B (and one W when split) of every
// microbatch, on rank stage % p, F before B before W; else the first problem found.
std::string check_schedule(const Schedule& s);

// The executor's communication discipline, Megatron's: a rank's actions fall in slots, one
// action each, except interleaved's steady state where F and B share one (Megatron's
// send_forward_backward_recv_forward_backward; one action per slot deadlocks there). Before
// slot j a rank posts one batched send/recv (Communicator::send_recv) holding the sends of
// slot j - 1 and the receives of slot j, and waits for it; after its last slot, the last
// sends. Size: slots + 1; an empty exchange is skipped (no call).
struct Exchange {
  std::vector<Message> sends, recvs;
  bool empty() const { return sends.empty() && recvs.empty(); }
};
std::vector<Exchange> exchanges(const Schedule& s, int rank);

// "" when (1) per ordered pair of ranks the k-th send of one is the k-th receive of the
// other (matching in posting order, as NCCL and untagged MPI do), and (2) the exchanges
// complete when every transfer is a rendezvous (a send finishes only when its receive is
// posted, and an exchange only when all its transfers did): no deadlock. Else what hangs.
std::string check_exchanges(const Schedule& s);

// Evaluation's forward-only schedule: each rank's F actions of `s`, in its order, one a
// slot (their activation messages unchanged). It is every F of the training schedule with
// the B and W taken out, so F(i) of stage s still follows F(i) of s - 1 on every rank;
// check_exchanges proves it runs (tests/test_pipeline_schedule.cpp, every shape).
Schedule forward_only_schedule(const Schedule& s);

// Per-action cost in arbitrary units (the plan: F = 1, B = 2, W = 1; the executor: the
// measured averages). Non-split schedules charge B + W for their B (the whole backward).
// comm: time from a send to the matching receive across ranks.
struct ActionCosts {
  double F = 1, B = 2, W = 1;
  double comm = 0;
  // Optional per model stage (size p v): overrides F, B, W for that stage.
  std::vector<double> stage_F, stage_B, stage_W;
  double cost(const Action& a, bool split) const;
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
  // (order-based, so exact for any costs). held_until_w: F done, W not yet (split only;
  // W still reads the inputs of the weight GEMMs and their output gradients).
  std::vector<int> peak_held, peak_held_until_w;
};

// Runs every rank's list in order, each action as soon as the rank is free and its inputs
// exist: F(i) of stage s after F(i) of s - 1; B(i) of s after F(i) of s and B(i) of s + 1;
// W(i) after B(i). An action that can never run is a deadlock (reported, not thrown).
Simulation simulate(const Schedule& s, const ActionCosts& costs = {});
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
