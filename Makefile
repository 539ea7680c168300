# paralab build. `make` builds ./trainer with nvcc when the CUDA toolkit is present (CUDA
# and CPU backends in one binary, sm_80 + sm_90); `make CPU_ONLY=1` builds with g++ alone.
# Both builds treat warnings as errors.
#
#   make            set-up, build ./trainer
#   make run        set-up, build, train the demo model
#   make test       set-up, build, run every test (tests/run_all.sh)
#   make unit-test  the GoogleTest binary alone;  make mpi-test  the MPI suites alone
#   make lessons    every lesson's check (lessons/NN-topic/check.sh)
#   make plan       print the plan of the demo model
#   make lint       the include order of the layers (tests/check_layout.sh)
#
# The public targets run scripts/setup.sh first and then build in a second make: the
# compiler flags come from pkg-config, which can only answer once setup.sh has installed
# MPICH and OpenBLAS, so they must not be asked while this make reads the file.

NVCC := $(shell command -v nvcc 2>/dev/null)
ifeq ($(NVCC),)
  CPU_ONLY := 1
endif
CPU_ONLY ?= 0

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

ifeq ($(CPU_ONLY),1)
  BUILD ?= build/cpu
  FLAVOUR_FLAGS := -DPARALAB_CPU_ONLY
  CUDA_SRCS :=
  CUDA_LIBS :=
else
  BUILD ?= build/cuda
  CUDA_HOME := $(patsubst %/bin/nvcc,%,$(NVCC))
  CUDA_SRCS := $(wildcard kernels/cuda/*.cu)
  NVCCFLAGS = -std=c++17 -O2 -I. $(MPI_CFLAGS) -gencode arch=compute_80,code=sm_80 \
              -gencode arch=compute_90,code=sm_90 -Werror all-warnings \
              -Xcompiler -Wall,-Wextra,-Werror -MMD -MP
  FLAVOUR_FLAGS := -I$(CUDA_HOME)/include
  CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lnccl
endif

HOST_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(HOST_SRCS))
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

.PHONY: all run test unit-test mpi-test lessons plan clean setup lint binaries packages FORCE
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
	bash tests/run_all.sh

unit-test: setup
	+@$(SUBMAKE) binaries
	OPENBLAS_NUM_THREADS=1 build/unit_tests

mpi-test: setup
	+@$(SUBMAKE) binaries
	bash tests/run_all.sh --mpi-only

lessons: setup
	+@$(SUBMAKE) trainer
	bash tests/run_all.sh --lessons

lint:
	bash tests/check_layout.sh

binaries: trainer $(addprefix build/,$(TEST_BINS))

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
# CPU-only build.
ifeq ($(CPU_ONLY),1)
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

$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

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
