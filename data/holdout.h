// Holding rows out of a training file for validation: which rows, and a reader that keeps one
// side of the split.
//
// A row is held out by a hash of its content (label, keys, values, dense features), not by its
// position, so the split is the same however the file is read: text or binary cache, one
// reader or a cluster's workers each taking every W-th batch, generated data in memory. Equal
// rows fall on the same side, so no duplicate of a validation row is trained on.
#pragma once

#include <cstddef>
#include <memory>

#include "data/batch.h"
#include "data/reader.h"

namespace colony {

// Whether row `row` of `batch` belongs to the held-out fraction `fraction` (0 <= fraction <= 1)
// of all rows. A pure function of the row's content and the fraction; a row held out at a
// fraction is held out at every larger one.
bool row_held_out(const Batch& batch, size_t row, double fraction);

// Reads `inner` and returns only its held-out rows (keep_held_out) or only the others,
// re-batched to `batch_rows` rows (every batch but the last is full). stats() is the inner
// reader's, with `rows` the rows returned and `rows_total` (when the inner reader knows it)
// scaled by the side's share, an estimate for progress bars. Errors are the inner reader's.
std::unique_ptr<BatchReader> make_holdout_reader(std::unique_ptr<BatchReader> inner,
                                                 const HoldoutSplit& split, size_t batch_rows);

}  // namespace colony
