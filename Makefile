# paralab build. `make` builds ./trainer with nvcc when the CUDA toolkit is present (CUDA
# and CPU backends in one binary: sm_80 + sm_90, and compute_75 + sm_75 for the T4, or
# compute_70 + sm_70 for the V100 too with CUDA 12); `make CPU_ONLY=1` builds with g++ alone;
# `make emulated` builds build/emulated/{trainer,op_check,emulator_tests}, whose CUDA device is
# the emulated one (kernels/emulator/README.md: paralab's CUDA code, kernels included, run on
# the CPU by g++, no toolkit needed). Every build treats warnings as errors.
#
#   make            set-up, build ./trainer
#   make run        set-up, build, train the demo model
#   make test       set-up, build (the emulated device's binaries too), run every test
#                   (tests/run_all.sh)
#   make unit-test  the GoogleTest binary alone;  make mpi-test  the MPI suites alone
#   make lessons    every lesson's check (lessons/NN-topic/check.sh)
#   make plan       print the plan of the demo model
#   make lint       the include order of the layers (tests/check_layout.sh)
#   make emulated   set-up, build the emulated device's binaries (build/emulated)
#
# The public targets run scripts/setup.sh first and then build in a second make: the
# compiler flags come from pkg-config, which can only answer once setup.sh has installed
# MPICH and OpenBLAS, so they must not be asked while this make reads the file.

NVCC := $(shell command -v nvcc 2>/dev/null)
ifeq ($(NVCC),)
  CPU_ONLY := 1
endif
CPU_ONLY ?= 0
EMULATED ?= 0

CXX := g++
# Recursively expanded (=): asked when a recipe needs them, after setup.sh has run.
MPI_CFLAGS = $(shell pkg-config --cflags mpich 2>/dev/null)
MPI_LIBS = $(shell pkg-config --libs mpich 2>/dev/null)
BLAS_CFLAGS = $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS = $(shell pkg-config --libs openblas 2>/dev/null)
TOML_CFLAGS = $(shell pkg-config --cflags tomlplusplus 2>/dev/null)
TOML_LIBS = $(shell pkg-config --libs tomlplusplus 2>/dev/null)
WARN := -Wall -Wextra -Werror
CXXFLAGS = -std=c++17 -O2 -g -I. $(MPI_CFLAGS) $(BLAS_CFLAGS) $(TOML_CFLAGS) $(WARN) -MMD -MP \
           $(FLAVOUR_FLAGS)
LDLIBS = $(MPI_LIBS) $(BLAS_LIBS) $(TOML_LIBS) -lpthread

# The folders in their dependency order (notes/design.md): each includes only from those
# before it; tests/check_layout.sh (make lint) holds it.
LAYERS := kernels measure parallel model checkpoint plan report cli app
HOST_SRCS := $(wildcard kernels/cpu/*.cpp $(addsuffix /*.cpp,$(LAYERS)))
TEST_SRCS := $(wildcard tests/*.cpp)

ifeq ($(EMULATED),1)
  # The CUDA sources, each rewritten once (kernels/emulator/translate.py: launches and
  # __shared__ declarations) and compiled by g++ against the emulator's CUDA headers, with
  # every load and store hooked (-fsanitize=thread's calls, answered by kernels/emulator/
  # hooks.cpp, not by a sanitizer runtime) and every function entry (-finstrument-functions:
  # a launch learns its kernel's address). -ffp-contract=off: no multiply-add fuses unless
  # the code asks (fmaf), as in the CPU twins.
  BUILD ?= build/emulated
  FLAVOUR_FLAGS := -DPARALAB_EMULATED -Ikernels/emulator/include
  CUDA_SRCS := $(wildcard kernels/cuda/*.cu)
  EMU_GEN_HEADERS := $(patsubst %,$(BUILD)/gen/%,$(wildcard kernels/cuda/*.cuh kernels/cuda/*.h))
  EMU_KERNEL_FLAGS = -std=c++17 -O2 -g -x c++ -I$(BUILD)/gen -I. -Ikernels/emulator/include \
      $(MPI_CFLAGS) -DPARALAB_EMULATED -D__CUDA_ARCH__=900 -include cuda_runtime.h \
      -fsanitize=thread -finstrument-functions \
      -finstrument-functions-exclude-file-list=/usr/,kernels/emulator/,kernels/math.h,kernels/common.h,kernels/fp8.h \
      -ffp-contract=off $(WARN) -Wno-unknown-pragmas -MMD -MP
  HOST_SRCS += $(wildcard kernels/emulator/*.cpp)
  CUDA_LIBS := -lboost_context
  # The layers above kernels/ compile alike in both builds: none of their sources includes a
  # CUDA header but the few grep finds below, and kernels/common.h keeps no flavour of its own
  # (device_name lives in kernels/device.cpp). So where nvcc makes the main build, the emulated
  # build links its objects of them (build/cuda; made here with the main build's flags when
  # missing) and compiles only kernels/, the emulator and those few: in CI about four fifths
  # of a clean emulated build. Without nvcc the main build is CPU_ONLY, whose dispatchers
  # differ (kernels/dispatch.h): then the emulated build compiles everything itself.
  ifeq ($(CPU_ONLY),0)
    MAIN_BUILD := build/cuda
    MAIN_FLAVOUR_FLAGS := -I$(patsubst %/bin/nvcc,%,$(NVCC))/include
    FLAVOURED_SRCS := $(shell grep -lE '^\#include <(cuda|nccl|cublas)' \
                        $(filter-out kernels/%,$(HOST_SRCS)))
    SHARED_HOST_SRCS := $(filter-out kernels/% $(FLAVOURED_SRCS),$(HOST_SRCS))
  endif
else ifeq ($(CPU_ONLY),1)
  BUILD ?= build/cpu
  FLAVOUR_FLAGS := -DPARALAB_CPU_ONLY
  CUDA_SRCS :=
  CUDA_LIBS :=
else
  BUILD ?= build/cuda
  CUDA_HOME := $(patsubst %/bin/nvcc,%,$(NVCC))
  CUDA_SRCS := $(wildcard kernels/cuda/*.cu)
  # Machine code for sm_80 (A100) and sm_90 (H100, H200), and PTX for the older GPUs the binary
  # also runs on, fp32 and fp16 only (docs/setup.md): the driver compiles a compute_XX PTX at
  # the first launch for any GPU of capability >= XX (and caches it, ~/.nv/ComputeCache), so one
  # PTX target serves V100 (7.0) and T4 (7.5) alike, as it serves an Ada or Blackwell card
  # without machine code of its own. CUDA 13 supports "all NVIDIA architectures from Turing
  # through Grace Blackwell" (CUDA Features Archive, 13.0): its oldest target is compute_75, so
  # a CUDA 13 build runs on a T4 but not a V100, which needs a CUDA 12 build (compute_70).
  # The same target's machine code (sm_75, or sm_70, which a 7.5 GPU also runs) is built too:
  # ptxas then assembles that PTX here, so an sm_80 instruction left outside its
  # __CUDA_ARCH__ guard fails the build instead of the first launch on a T4, and the T4 needs
  # no JIT. The kernels' sm_80 paths compile to a trap there (their entry points decline below
  # 8.0), so it costs little (notes/performance.md).
  PTX_ARCH := $(if $(shell $(NVCC) --list-gpu-arch 2>/dev/null | grep -x compute_70),compute_70,\
                compute_75)
  PTX_ARCH := $(strip $(PTX_ARCH))
  NVCCFLAGS = -std=c++17 -O2 -I. $(MPI_CFLAGS) -gencode arch=compute_80,code=sm_80 \
              -gencode arch=compute_90,code=sm_90 -gencode arch=$(PTX_ARCH),code=$(PTX_ARCH) \
              -gencode arch=$(PTX_ARCH),code=$(subst compute_,sm_,$(PTX_ARCH)) \
              -Werror all-warnings \
              -Xcompiler -Wall,-Wextra,-Werror -MMD -MP
  FLAVOUR_FLAGS := -I$(CUDA_HOME)/include
  CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lnccl
endif

HOST_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(filter-out $(SHARED_HOST_SRCS),$(HOST_SRCS))) \
             $(patsubst %.cpp,$(MAIN_BUILD)/%.o,$(SHARED_HOST_SRCS))
CUDA_OBJS := $(patsubst %.cu,$(BUILD)/%.cu.o,$(CUDA_SRCS))
TEST_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(TEST_SRCS))
LIB_OBJS := $(HOST_OBJS) $(CUDA_OBJS)
# What `make` builds, under $(BUILD); ./trainer and build/<test> are links to the build
# made last, so the commands in the README work whichever build it was.
TEST_BINS := unit_tests test_comm test_data_parallel hf_logits megatron_samples
# The build runs one compile per core unless told otherwise (`make -j1`, or -jN): a fresh
# machine's first `make run` compiled for 5 minutes on one of two cores.
JOBS = $(if $(filter -j% --jobs%,$(MAKEFLAGS)),,-j$(shell nproc 2>/dev/null || echo 1))
SUBMAKE = $(MAKE) --no-print-directory $(JOBS)

.PHONY: all run test unit-test mpi-test lessons plan clean setup lint binaries packages FORCE \
        emulated emulated-binaries emulated-kernel-flags emulated-link-libs \
        emulated-library-objects
all: setup
	+@$(SUBMAKE) trainer

setup:
	@bash scripts/setup.sh

run: setup
	+@$(SUBMAKE) trainer
	./trainer --config configs/models/tiny.toml

plan: setup
	+@$(SUBMAKE) trainer
	./trainer --config configs/models/tiny.toml --plan

test: setup
	+@$(SUBMAKE) binaries
	+@$(SUBMAKE) EMULATED=1 emulated-binaries
	bash tests/run_all.sh

unit-test: setup
	+@$(SUBMAKE) binaries
	OPENBLAS_NUM_THREADS=1 build/unit_tests

mpi-test: setup
	+@$(SUBMAKE) binaries
	+@$(SUBMAKE) EMULATED=1 emulated-binaries
	bash tests/run_all.sh --mpi-only

lessons: setup
	+@$(SUBMAKE) trainer
	+@$(SUBMAKE) EMULATED=1 build/emulated/op_check
	bash tests/run_all.sh --lessons

lint:
	bash tests/check_layout.sh

emulated: setup
	+@$(SUBMAKE) EMULATED=1 emulated-binaries

# The emulated device's binaries stay in build/emulated: ./trainer keeps naming the main build.
emulated-binaries: $(BUILD)/trainer $(BUILD)/op_check $(BUILD)/emulator_tests \
                   $(BUILD)/planted_driver $(BUILD)/kernel_resources.txt

binaries: trainer $(addprefix build/,$(TEST_BINS)) $(if $(filter 00,$(CPU_ONLY)$(EMULATED)),$(BUILD)/op_check)

# The link, remade on every make so that it always names this build's binary.
trainer: $(BUILD)/trainer FORCE
	@ln -sfn $(BUILD)/trainer trainer

$(addprefix build/,$(TEST_BINS)): build/%: $(BUILD)/% FORCE
	@ln -sfn $(patsubst build/%,%,$(BUILD))/$* $@

FORCE:

# A direct `make trainer` on a machine without the packages says what to do, once.
$(BUILD)/trainer.o $(LIB_OBJS) $(TEST_OBJS): | packages
packages:
	@pkg-config --exists mpich openblas tomlplusplus || { echo "make: MPICH, OpenBLAS or toml++ not found by" \
	  "pkg-config: run 'make' (it runs scripts/setup.sh) or 'bash scripts/setup.sh'" >&2; exit 2; }

# trainer.cu holds main() and no device code: nvcc compiles it in the CUDA build, g++ in the
# CPU-only and emulated builds.
ifneq ($(CPU_ONLY)$(EMULATED),00)
$(BUILD)/trainer.o: trainer.cu
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -x c++ -c $< -o $@
else
$(BUILD)/trainer.o: trainer.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
endif

$(BUILD)/trainer: $(BUILD)/trainer.o $(LIB_OBJS)
	$(CXX) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)

$(BUILD)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

# The CPU twins' loops (notes/performance.md): -O3 vectorises them (GCC 12's -O2 hardly
# does), -march=native uses the build machine's vector units, -ffp-contract=off keeps the
# rounding of the scalar code (no fused multiply-adds), -fno-math-errno and
# -fno-trapping-math let sqrtf and the clamps vectorise. Each machine builds its own binary.
KERNEL_FLAGS := -O3 -march=native -ffp-contract=off -fno-math-errno -fno-trapping-math
$(BUILD)/kernels/%.o: kernels/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(KERNEL_FLAGS) -c $< -o $@

ifeq ($(EMULATED),1)
.PRECIOUS: $(BUILD)/gen/kernels/cuda/% $(BUILD)/gen/tests/emulator/%
$(BUILD)/gen/kernels/cuda/%: kernels/cuda/% kernels/emulator/translate.py
	@mkdir -p $(dir $@)
	python3 kernels/emulator/translate.py $< $@
$(BUILD)/gen/tests/emulator/%: tests/emulator/% kernels/emulator/translate.py
	@mkdir -p $(dir $@)
	python3 kernels/emulator/translate.py $< $@

# The main build's objects this build links (SHARED_HOST_SRCS), compiled as the main build
# compiles them when it has not yet.
ifneq ($(SHARED_HOST_SRCS),)
$(patsubst %.cpp,$(MAIN_BUILD)/%.o,$(SHARED_HOST_SRCS)): FLAVOUR_FLAGS := $(MAIN_FLAVOUR_FLAGS)
$(MAIN_BUILD)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@
-include $(wildcard $(patsubst %.cpp,$(MAIN_BUILD)/%.d,$(SHARED_HOST_SRCS)))
endif

# The library objects, one per line, for tests/emulator/planted/defects.sh's links.
emulated-library-objects:
	@printf '%s\n' $(LIB_OBJS)

$(BUILD)/%.cu.o: $(BUILD)/gen/%.cu $(EMU_GEN_HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_KERNEL_FLAGS) -c $< -o $@

# Registers, static shared memory and stack per kernel (sm_90) from the nvcc build's ptxas
# reports, when this machine has made one (kernels/emulator/kernel_counters.h).
$(BUILD)/kernel_resources.txt: FORCE
	@python3 kernels/emulator/resources.py build/cuda/kernels/cuda > $@

# tests/emulator/planted/defects.sh's driver, and the flags it compiles each planted defect with.
$(BUILD)/planted_driver: $(BUILD)/tests/emulator/planted/driver.o $(LIB_OBJS)
	$(CXX) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)
emulated-kernel-flags:
	@echo $(EMU_KERNEL_FLAGS)
emulated-link-libs:
	@echo $(LDLIBS) $(CUDA_LIBS)

$(BUILD)/emulator_tests: $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard tests/emulator/*.cpp)) \
                         $(patsubst %.cu,$(BUILD)/%.cu.o,$(wildcard tests/emulator/*.cu)) $(LIB_OBJS)
	$(CXX) -o $@ $^ -lgtest -lgtest_main $(LDLIBS) $(CUDA_LIBS)
else
# ptxas's report of each kernel's registers, shared memory and spills (sm_80 and sm_90) is
# kept beside the object: the emulated device's kernel table reads it.
$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	@echo "$(NVCC) $(NVCCFLAGS) -Xptxas -v -c $< -o $@"
	@$(NVCC) $(NVCCFLAGS) -Xptxas -v -c $< -o $@ 2>$@.ptxas; status=$$?; \
	  grep -v -e '^ptxas info' -e '^    [0-9]* bytes stack frame' $@.ptxas >&2; exit $$status
endif

# op_check (scripts/gpu_check.sh runs it on a GPU, and the emulated build's on the emulated
# device): the nvcc build makes it too, so that CI compiles its GPU flavour with -Werror.
$(BUILD)/op_check: $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard tests/gpu/op_check*.cpp)) $(LIB_OBJS)
	$(CXX) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)

# The unit tests' own files at -O1: GoogleTest's macros make -O2 slow to compile, and the test
# code runs for seconds (the library it calls keeps -O2, the kernels -O3). A clean 2-core
# build of build/cpu/unit_tests, 2026-12-07: 125 s at -O2, 96 s at -O1 (the tests then run in
# 3.7 s, as at -O2), 69 s at -O0 (but 11.4 s to run: every make unit-test would pay it).
# Without x87 and with contraction off (-std=c++17), every -O rounds alike.
$(TEST_OBJS): CXXFLAGS += -O1

$(BUILD)/unit_tests: $(TEST_OBJS) $(LIB_OBJS)
	$(CXX) -o $@ $^ -lgtest -lgtest_main $(LDLIBS) $(CUDA_LIBS)

# MPI tests: one binary per file, each with its own main() (MPI_Init), run under mpirun by
# tests/mpi/run_mpi_tests.sh
$(BUILD)/test_comm: $(BUILD)/tests/mpi/test_comm.o $(LIB_OBJS)
	$(CXX) -o $@ $^ -lgtest $(LDLIBS) $(CUDA_LIBS)

$(BUILD)/test_data_parallel: $(BUILD)/tests/mpi/test_data_parallel.o $(LIB_OBJS)
	$(CXX) -o $@ $^ -lgtest $(LDLIBS) $(CUDA_LIBS)

# paralab's logits of a Hugging Face export, for scripts/hf_check.py (tests/scripts/hf_check.sh)
$(BUILD)/hf_logits: $(BUILD)/tests/tools/hf_logits.o $(LIB_OBJS)
	$(CXX) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)

# paralab's samples of a Megatron data flag set, for tests/scripts/megatron_data.py
$(BUILD)/megatron_samples: $(BUILD)/tests/tools/megatron_samples.o $(LIB_OBJS)
	$(CXX) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)

clean:
	rm -rf build trainer

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
