// Package input reads training data as an elastic.Source: batches of dense
// rows (elastic.Batch{X, Cols, Y}) from files, standard input and network
// streams, whole or as one shard of many, from the start or resumed at a
// position.
//
// # Where from
//
// Open (and OpenShard, OpenShardAt) take a URI:
//
//   - a file path; a file whose content is gzip compressed is decompressed
//     (recognised by its magic bytes, so "data.csv.gz" and a gzip stream on
//     standard input both work);
//   - "-" for standard input;
//   - "tcp://host:port": the reader connects and reads until the peer closes
//     the connection;
//   - "http://..." or "https://...": the response body is streamed.
//
// Network streams are read once and never stored (the non-persistent data
// case): they cannot be resumed at a position (ErrNotResumable), and
// cancelling a Next that waits on one closes it. NewReader and
// NewShardReader read any io.Reader.
//
// The format is Options.Format or the suffix of the name (for URLs, of the
// path), after an optional ".gz": .csv, .jsonl/.json/.ndjson, .libsvm/.svm.
//
// # Formats
//
// In every format a line is a row; blank lines and lines whose first
// non-blank character is '#' are not rows (and are not counted for shards
// and positions). Values are decimal numbers as strconv.ParseFloat reads
// them; NaN and infinities are rejected. Every row must have the width of
// the first row the reader parses, and either every row has a label or
// none.
//
// CSV: numbers separated by Options.Comma (',' by default; ' ' splits on
// runs of blanks), each optionally within double quotes. Options.Label
// names the label column (1-based; LastColumn for the last; 0, the
// default, for none): it goes to Y, the other columns to X. Options.Header
// skips the first line. Quoted delimiters and multi-line fields are not
// supported (the data is numbers).
//
// JSON lines: one object per line, {"x": [numbers], "y": number} or
// {"features": [numbers], "label": number}; the label is optional, and
// other fields are ignored.
//
// libsvm: "label index:value index:value ... # comment" with 1-based
// indices in any order, each at most once; absent features are 0 and
// "qid:n" is ignored. The output is dense with Options.Features columns;
// if 0, the width is the highest index of the first batch, and a larger
// index later is an error. Set Options.Features when reading shards or
// resuming, so that every reader has the same width. Indices go up to
// MaxFeatures, and a batch holds at most MaxBatchValues values.
//
// Errors name the input, the line and what was expected, e.g.
//
//	data.csv:17: column 3: "abc" is not a number
//
// # Shards and positions
//
// OpenShard(uri, opts, k, n) reads shard k of n, so that n readers
// together read every row exactly once. Options.Split says how the rows
// are divided:
//
//   - SplitRanges: shard k holds the lines that start in the bytes
//     [k*size/n, (k+1)*size/n) of the file. A shard reads from the first
//     line that starts in its range (the line after the first '\n' at or
//     after the range's start minus one, so a line that starts before the
//     range belongs to the shard before) through the last line that starts
//     in it, wherever that line ends, and each reader reads about size/n
//     bytes. Shards hold about as many bytes as each other, not rows, and a
//     shard of a small file may be empty. Only the file's first line is a
//     header (Options.Header), in whichever shard it falls.
//   - SplitRows: shard k holds the rows i (0-based, counted over the whole
//     input) with i % n == k. It works on any input, but each reader reads
//     the whole input and parses only its rows.
//   - SplitAuto, the default, is SplitRanges for a file opened by name
//     that is a regular file and not gzip compressed, and SplitRows for
//     everything else: gzip (decompression cannot start mid-stream),
//     standard input, network streams, and the readers of NewShardReader.
//
// Asking for SplitRanges where it cannot be done is an error
// (ErrNotSplittable) naming the input. Source.Split tells which split a
// reader uses.
//
// Pos is the number of rows of the shard returned so far. OpenShardAt(uri,
// opts, k, n, pos) skips the first pos rows of the shard unparsed (for a
// split by ranges, from the start of its range) and goes on from there, so
// a stopped job resumes where it stopped: store Pos with the state in the
// checkpoint. A position means the same rows only for the same input and
// split: the byte ranges depend on the file's size and content, so the file
// must not change between a checkpoint and its resume (nothing detects it:
// rows would be read twice or not at all), every worker of a job must see
// byte-identical copies of it (not, say, one with CRLF line endings), and a
// checkpoint taken with one split must be resumed with the same one.
package input
