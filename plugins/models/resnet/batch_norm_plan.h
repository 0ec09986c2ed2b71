#pragma once
// How the fused batch norm's kernels (batch_norm_act_kernels.cu) cut a
// problem into thread blocks: plain C++ (no CUDA, no LibTorch), so that the
// planning is tested on any machine (tests/batch_norm_plan_test.cc beside it). The
// kernels' launch code asks the device for its multiprocessors and hands
// them to Plan.

#include <cstdint>

#include "kernel_types.h"

namespace resnet::kernels {

struct BnProblem {
  DType dtype;
  Layout layout;
  int64_t n, c, s;  ///< batch, channels, H * W
  bool relu;        ///< act is ReLU (else the identity)
  bool residual;    ///< r is added before act (with relu only)
  /// NHWC training: statistics and the element-wise pass as one kernel each
  /// way where the tensor fits in the registers of blocks resident together
  /// (OnePassNhwc); false: always the two kernels.
  bool one_pass = true;
  /// On GPUs of compute capability 9.0 and later, a one-pass kernel's blocks
  /// as a thread block cluster and the NHWC passes as programmatic
  /// dependents of the kernel before them; false: launched as on earlier
  /// GPUs (the ResNets' option sm90_launches: never).
  bool sm90_launches = true;
};

/// Threads of every block of these kernels.
constexpr int kBnThreads = 256;

// The last block of a reduction adds splits x (channels of its tile) partial
// sums alone: tiles of at most 64 channels and at most 256 splits keep that
// tail to a few rounds of loads per thread. About four blocks per SM in all
// (each thread at least 4 rows; the kernels are built to fit four per SM)
// keep the memory system busy: with two, the reductions read at a third to a
// half of the element-wise passes' rate (ResNet50 bf16 b1024 kernel trace).
// Where a tile of 64 channels cannot fill the device within kMaxSplits
// blocks (64 channels over many rows: the ResNets' stem and layer1 at batch
// 1024), the tiles narrow, down to kMinReduceTx packs (64 bytes of a row, two
// sectors), until they do.
constexpr int kReduceTileChannels = 64;
constexpr int kMinReduceTx = 4;
constexpr int kMaxSplits = 256;
constexpr int kReduceBlocksPerSm = 4;
constexpr int kReduceRowsPerThread = 4;

// The one-pass kernels (OnePassNhwc): blocks per SM they are built to fit
// (all of a launch's blocks must be resident at once: they wait for each
// other), the rows a thread keeps in registers (2 or 4: 8 lost to the two
// kernels in 14 of the 15 shapes where a planner chose them, 0.73-0.99x on an
// H200), and the most blocks of one channel tile (8, the portable cluster
// size: with more blocks a tile the one kernel lost to the two).
constexpr int kOnePassBlocksPerSm = 2;
constexpr int kOnePassRows[] = {2, 4};
constexpr int kOnePassMaxSplits = 8;
// The narrowest one-pass tile: 2 packs of 16 bytes (one 32-byte sector of a row).
constexpr int kMinOnePassTx = 2;
/// The most channel tiles of one reduction (the counters a stream holds).
constexpr int kMaxTiles = 4096;

/// How a problem is cut into blocks.
struct Geometry {
  int vec = 1;                ///< elements per pack
  int tx = 1;                 ///< NHWC reduction: threads along a row's packs (ty = kBnThreads / tx rows)
  int tiles = 1;              ///< channel tiles of a reduction (NCHW: the channels)
  int splits = 1;             ///< reduction blocks per tile
  int elem_tx = 1;            ///< NHWC element-wise pass: threads along a row's packs
  int elem_tiles = 1;         ///< its channel tiles
  int rows_blocks = 1;        ///< its blocks per tile, at most (one wave: the launch narrows it to the occupancy)
  int one_pass_rows = 0;      ///< NHWC one pass: rows per thread (0: the two kernels)
  int one_pass_splits = 0;    ///< its blocks per tile
  int one_pass_tx = 0;        ///< its threads along a row's packs (tx or narrower)
  int one_pass_tiles = 0;     ///< its channel tiles
  bool sm90_launches = true;  ///< the problem's: clusters and dependent launches where the GPU has them
};

/// The widest pack (elements, 16 bytes at most) that divides `extent`.
int WidestPack(int64_t extent, int bytes);

/// Whether these kernels take the problem (channels and sizes in range,
/// a residual only with ReLU, more than one value per channel).
bool Supported(const BnProblem& problem) noexcept;

/// The blocks of `problem` on a device of `sms` multiprocessors (problem
/// Supported).
Geometry Plan(const BnProblem& problem, int sms);

}  // namespace resnet::kernels
