package records

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// bucketOutput holds what runs wrote on stdout and stderr, for runs whose
// output is kept (dispatched runs): the last OutputLimit bytes of each
// stream. It is made on the first write.
var bucketOutput = []byte("output")

// OutputLimit is how much of each stream of a run is kept: its last bytes.
const OutputLimit = 1 << 20

// Streams of a run's output.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

func outputKey(run, stream string) []byte { return []byte(run + "\x00" + stream) }

// AppendOutput adds p to what is kept of a run's stream, keeping its last
// OutputLimit bytes; the offset kept with them counts the bytes cut from the
// front, so that a reader following the stream knows where it stands.
func (s *Store) AppendOutput(run, stream string, p []byte) error {
	return s.KeepOutput(run, map[string][]byte{stream: p}, false)
}

// KeepOutput adds to what is kept of a run's streams (as AppendOutput does
// for each) and, with done, marks the output complete (FinishOutput), in one
// durable write.
func (s *Store) KeepOutput(run string, streams map[string][]byte, done bool) error {
	for stream := range streams {
		if stream != Stdout && stream != Stderr {
			return fmt.Errorf("run %s: no stream %q (stdout or stderr)", run, stream)
		}
	}
	empty := true
	for _, p := range streams {
		empty = empty && len(p) == 0
	}
	if empty && !done {
		return nil
	}
	return s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketOutput)
		if err != nil {
			return err
		}
		for _, stream := range []string{Stdout, Stderr} {
			if p := streams[stream]; len(p) > 0 {
				if err := appendOutput(b, run, stream, p); err != nil {
					return err
				}
			}
		}
		if done {
			return b.Put(outputKey(run, outputDone), []byte{1})
		}
		return nil
	})
}

func appendOutput(b *bolt.Bucket, run, stream string, p []byte) error {
	key := outputKey(run, stream)
	start, kept := decodeOutput(b.Get(key))
	if total := len(kept) + len(p); total > OutputLimit {
		cut := total - OutputLimit
		start += uint64(cut)
		if cut >= len(kept) {
			p = p[cut-len(kept):]
			kept = nil
		} else {
			kept = kept[cut:]
		}
	}
	buf := make([]byte, 0, len(kept)+len(p))
	buf = append(buf, kept...)
	buf = append(buf, p...)
	return b.Put(key, encodeOutput(start, buf))
}

// Output returns what is kept of a run's stream, and the offset in the whole
// stream of its first byte (non-zero once more than OutputLimit was
// written). A run whose output was never kept has none: nil, 0.
func (s *Store) Output(run, stream string) (data []byte, offset uint64, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketOutput)
		if b == nil {
			return nil
		}
		start, kept := decodeOutput(b.Get(outputKey(run, stream)))
		data, offset = append([]byte(nil), kept...), start
		return nil
	})
	return data, offset, err
}

// A stream is kept as the offset of its first byte (8 bytes, big endian)
// and the bytes.
func encodeOutput(start uint64, data []byte) []byte {
	return append(seqKey(start), data...)
}

func decodeOutput(raw []byte) (uint64, []byte) {
	if len(raw) < 8 {
		return 0, nil
	}
	var start uint64
	for _, c := range raw[:8] {
		start = start<<8 | uint64(c)
	}
	return start, raw[8:]
}

const outputDone = "done"

// FinishOutput marks a run's output as complete: everything it wrote is kept
// (up to OutputLimit of each stream), and nothing more will come.
func (s *Store) FinishOutput(run string) error { return s.KeepOutput(run, nil, true) }

// OutputDone reports whether a run's output is complete (FinishOutput).
func (s *Store) OutputDone(run string) (bool, error) {
	done := false
	err := s.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketOutput); b != nil {
			done = b.Get(outputKey(run, outputDone)) != nil
		}
		return nil
	})
	return done, err
}
