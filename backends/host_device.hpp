// TESSERA_HOST_DEVICE marks functions compiled for both the host and CUDA
// devices: kernel bodies written once, unit-tested on the CPU, launched on GPU.
#pragma once

#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HOST_DEVICE
#endif
