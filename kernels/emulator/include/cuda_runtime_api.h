// kernels/emulator/include/cuda_runtime_api.h: the emulated runtime (cuda_runtime.h).
#pragma once
#include "kernels/emulator/include/cuda_runtime.h"
