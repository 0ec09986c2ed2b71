#include "batch_norm_plan.h"

#include <algorithm>

namespace resnet::kernels {

int WidestPack(int64_t extent, int bytes) {
  for (int width = 16 / bytes; width > 1; width /= 2)
    if (extent % width == 0) return width;
  return 1;
}

bool Supported(const BnProblem& pr) noexcept {
  if (pr.n < 1 || pr.c < 1 || pr.s < 1 || pr.c > kMaxTiles) return false;
  if (pr.residual && !pr.relu) return false;
  if (pr.n * pr.s < 2) return false;  // one value per channel: no variance
  return pr.n <= (int64_t{1} << 40) / (pr.c * pr.s);
}

namespace {

// NHWC: the reduction's tiles and splits, the element-wise pass's grid, and
// the one-pass kernel where one fits.
void PlanNhwc(const BnProblem& pr, int sms, Geometry& g) {
  const int64_t rows = pr.n * pr.s;
  g.vec = WidestPack(pr.c, ElementBytes(pr.dtype));
  const int64_t packs = pr.c / g.vec;
  const int64_t want = int64_t{kReduceBlocksPerSm} * sms;
  g.tx = static_cast<int>(std::clamp<int64_t>(kReduceTileChannels / g.vec, 1, packs));
  for (;;) {
    g.tiles = static_cast<int>((packs + g.tx - 1) / g.tx);
    const int64_t rows_per_block = int64_t{kReduceRowsPerThread} * (kBnThreads / g.tx);
    const int64_t needed = (rows + rows_per_block - 1) / rows_per_block;
    g.splits = static_cast<int>(
        std::clamp<int64_t>(needed, 1, std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, want / g.tiles))));
    // Narrower tiles only where kMaxSplits, not the rows or the device,
    // held the grid below `want` blocks.
    const bool capped = needed > g.splits && g.splits == kMaxSplits && int64_t{g.tiles} * g.splits < want;
    if (!capped || g.tx % 2 != 0 || g.tx / 2 < kMinReduceTx) break;
    g.tx /= 2;
  }
  g.elem_tx = static_cast<int>(std::min<int64_t>(packs, 32));
  g.elem_tiles = static_cast<int>((packs + g.elem_tx - 1) / g.elem_tx);
  const int64_t elem_ty = kBnThreads / g.elem_tx;
  g.rows_blocks = static_cast<int>(
      std::clamp<int64_t>((rows + 4 * elem_ty - 1) / (4 * elem_ty), 1, std::max<int64_t>(1, 8 * sms / g.elem_tiles)));
  // One kernel each way (full 16-byte packs only) with the fewest rows per
  // thread that fit the grid in one block per multiprocessor, else in the
  // kOnePassBlocksPerSm that every such kernel fits, with at most
  // kOnePassMaxSplits blocks per channel tile: on an H200 the one kernel lost
  // to the two wherever more blocks shared a tile (a cost that grew with
  // them, about 0.17 us per block and kernel) and won by 1.1-1.5x where 2-8
  // did. Where the reduction's tile needs more blocks than that, narrower
  // tiles (down to kMinOnePassTx packs, the widest that fits): more rows per
  // block, so fewer blocks per tile (the ResNets' layer 2 at batch 128).
  if (!pr.one_pass || g.vec != 16 / ElementBytes(pr.dtype)) return;
  const int narrowest = std::min(g.tx, kMinOnePassTx);
  for (int tx = g.tx; tx >= narrowest; tx /= 2) {
    const int64_t tiles = (packs + tx - 1) / tx, rows_per_pass = kBnThreads / tx;
    for (int per_sm = 1; per_sm <= kOnePassBlocksPerSm; ++per_sm) {
      for (const int rows_per_thread : kOnePassRows) {
        const int64_t splits = (rows + rows_per_pass * rows_per_thread - 1) / (rows_per_pass * rows_per_thread);
        if (splits <= kOnePassMaxSplits && splits * tiles <= int64_t{per_sm} * sms) {
          g.one_pass_rows = rows_per_thread;
          g.one_pass_splits = static_cast<int>(splits);
          g.one_pass_tx = tx;
          g.one_pass_tiles = static_cast<int>(tiles);
          return;
        }
      }
    }
    if (tx % 2 != 0) return;
  }
}

}  // namespace

Geometry Plan(const BnProblem& pr, int sms) {
  Geometry g;
  if (pr.layout == Layout::kNhwc) {
    PlanNhwc(pr, sms, g);
    return g;
  }
  const int64_t rows = pr.n * pr.s;
  g.vec = WidestPack(pr.s, ElementBytes(pr.dtype));
  g.tiles = static_cast<int>(pr.c);
  const int64_t packs = rows / g.vec;
  const int64_t packs_per_block = int64_t{kReduceRowsPerThread} * kBnThreads;
  g.splits = static_cast<int>(
      std::clamp<int64_t>((packs + packs_per_block - 1) / packs_per_block, 1,
                          std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, kReduceBlocksPerSm * sms / pr.c))));
  return g;
}

}  // namespace resnet::kernels
