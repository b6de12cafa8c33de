package sqlite

// MergeRows is mergeRows, for the tests.
const MergeRows = mergeRows
