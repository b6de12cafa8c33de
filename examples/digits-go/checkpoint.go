package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/virga-ml/virga/examples/digits-go/mlp"
)

// checkpointFile is the checkpoint's name inside the checkpoint directory.
const checkpointFile = "model.ckpt"

// checkpointMagic starts every checkpoint file; the last byte is the format version.
var checkpointMagic = []byte("VIRGADG1")

// checkpointHeader describes a checkpoint: how far training got and with
// which settings. Settings other than Hidden are recorded so that a resume
// with different ones can be flagged (it would not reproduce a run from scratch).
type checkpointHeader struct {
	Epoch    int     `json:"epoch"` // epochs completed
	Inputs   int     `json:"inputs"`
	Hidden   int     `json:"hidden"`
	Classes  int     `json:"classes"`
	LR       float64 `json:"lr"`
	L2       float64 `json:"l2"`
	Momentum float64 `json:"momentum"`
	Batch    int     `json:"batch"`
	Seed     int64   `json:"seed"`
}

// encodeCheckpoint lays out a checkpoint:
//
//	"VIRGADG1"                     magic and version
//	uint32 n, n bytes              header, JSON
//	uint64 m, m float64            parameters then momentum buffer, IEEE 754 bits
//	uint32                         CRC-32 (IEEE) of everything before it
//
// All integers are little-endian.
func encodeCheckpoint(h checkpointHeader, m *mlp.MLP) ([]byte, error) {
	hdr, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encoding checkpoint header: %w", err)
	}
	var buf bytes.Buffer
	buf.Grow(len(checkpointMagic) + 4 + len(hdr) + 8 + 16*len(m.Params) + 4)
	buf.Write(checkpointMagic)
	buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(hdr))))
	buf.Write(hdr)
	buf.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(m.Params)+len(m.Velocity))))
	var b [8]byte
	for _, vs := range [][]float64{m.Params, m.Velocity} {
		for _, v := range vs {
			binary.LittleEndian.PutUint64(b[:], math.Float64bits(v))
			buf.Write(b[:])
		}
	}
	buf.Write(binary.LittleEndian.AppendUint32(nil, crc32.ChecksumIEEE(buf.Bytes())))
	return buf.Bytes(), nil
}

// decodeCheckpoint parses what encodeCheckpoint wrote, into a new network.
func decodeCheckpoint(data []byte) (checkpointHeader, *mlp.MLP, error) {
	var h checkpointHeader
	if len(data) < len(checkpointMagic)+4+8+4 || !bytes.Equal(data[:len(checkpointMagic)], checkpointMagic) {
		return h, nil, errors.New("not a digits-go checkpoint (bad magic or too short)")
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return h, nil, errors.New("checksum mismatch: the file is damaged")
	}
	rest := body[len(checkpointMagic):]
	n := binary.LittleEndian.Uint32(rest)
	rest = rest[4:]
	if uint64(n) > uint64(len(rest)) {
		return h, nil, errors.New("truncated header")
	}
	if err := json.Unmarshal(rest[:n], &h); err != nil {
		return h, nil, fmt.Errorf("header: %w", err)
	}
	rest = rest[n:]
	if h.Inputs != mlp.NumInputs || h.Classes != mlp.NumClasses || h.Hidden < 1 || h.Epoch < 0 {
		return h, nil, fmt.Errorf("header %+v: want %d inputs, %d classes, hidden >= 1", h, mlp.NumInputs, mlp.NumClasses)
	}
	if len(rest) < 8 {
		return h, nil, errors.New("truncated parameters")
	}
	count := binary.LittleEndian.Uint64(rest)
	rest = rest[8:]
	want := uint64(2 * mlp.NumParams(h.Hidden))
	if count != want || uint64(len(rest)) != 8*count {
		return h, nil, fmt.Errorf("%d values for %d hidden units, want %d", count, h.Hidden, want)
	}
	m := mlp.NewMLP(h.Hidden, &mlp.SplitMix64{})
	for i := range m.Params {
		m.Params[i] = math.Float64frombits(binary.LittleEndian.Uint64(rest[8*i:]))
	}
	rest = rest[8*len(m.Params):]
	for i := range m.Velocity {
		m.Velocity[i] = math.Float64frombits(binary.LittleEndian.Uint64(rest[8*i:]))
	}
	return h, m, nil
}

// saveCheckpoint writes the checkpoint into dir atomically: a temporary file
// in the same directory, synced, then renamed over model.ckpt, then the
// directory synced. A reader (or Virga, saving the directory on the next
// report) sees the old checkpoint or the new one, never a mix.
func saveCheckpoint(dir string, h checkpointHeader, m *mlp.MLP) error {
	data, err := encodeCheckpoint(h, m)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating checkpoint directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, checkpointFile+".tmp-*")
	if err != nil {
		return fmt.Errorf("creating checkpoint: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing checkpoint: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("syncing checkpoint: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing checkpoint: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, checkpointFile)); err != nil {
		return fmt.Errorf("installing checkpoint: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // best effort: some file systems cannot sync directories
		d.Close()
	}
	return nil
}

// loadCheckpoint reads dir's checkpoint. ok is false when there is none.
func loadCheckpoint(dir string) (h checkpointHeader, m *mlp.MLP, ok bool, err error) {
	path := filepath.Join(dir, checkpointFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return h, nil, false, nil
	}
	if err != nil {
		return h, nil, false, fmt.Errorf("reading checkpoint: %w", err)
	}
	h, m, err = decodeCheckpoint(data)
	if err != nil {
		return h, nil, false, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return h, m, true, nil
}
