package netwall

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A repository's submodules are where its git runs another repository's
// configuration: git status, diff and the like go into every gitlink of the
// index whose directory holds a .git, and obey that repository's
// core.fsmonitor and hooks. A run writes its work tree for real, so a
// gitlink is a way for it to make the host's git obey a repository it made.
// The wall reads the gitlinks of the index before the run (to hold their
// .git read-only, or overlay their git directories) and of the index the run
// leaves (which is not copied back when it names a gitlink that was not
// there before).

// gitlinkMode is the index entry mode of a submodule (S_IFGITLINK).
const gitlinkMode = 0o160000

// indexGitlinks lists the paths of the gitlink entries of a git index, of
// either object format.
func indexGitlinks(b []byte) ([]string, error) {
	if len(b) < 12 || string(b[:4]) != "DIRC" {
		return nil, errors.New("not a git index")
	}
	var err error
	for _, hashLen := range []int{20, 32} {
		var links []string
		if links, err = gitlinksWith(b, hashLen); err == nil {
			return links, nil
		}
	}
	return nil, err
}

// gitlinksWith parses the index's entries with object ids of hashLen bytes.
func gitlinksWith(b []byte, hashLen int) ([]string, error) {
	version := binary.BigEndian.Uint32(b[4:8])
	if version < 2 || version > 4 {
		return nil, fmt.Errorf("index version %d", version)
	}
	n := int(binary.BigEndian.Uint32(b[8:12]))
	end := len(b) - hashLen // the trailing checksum
	if end < 12 || n < 0 || n > end/(40+hashLen+3) {
		return nil, errors.New("index entries exceed the file")
	}
	var links []string
	var prev []byte
	off := 12
	for i := 0; i < n; i++ {
		start := off
		fixed := 40 + hashLen + 2
		if off+fixed > end {
			return nil, errors.New("index entry truncated")
		}
		mode := binary.BigEndian.Uint32(b[off+24 : off+28])
		flags := binary.BigEndian.Uint16(b[off+40+hashLen : off+fixed])
		off += fixed
		if flags&0x4000 != 0 {
			if version < 3 {
				return nil, errors.New("extended flags in a version 2 index")
			}
			off += 2
			if off > end {
				return nil, errors.New("index entry truncated")
			}
		}
		var path []byte
		if version == 4 {
			strip, w, err := indexVarint(b[off:end])
			if err != nil {
				return nil, err
			}
			off += w
			if strip > uint64(len(prev)) {
				return nil, errors.New("index path strips more than the previous one has")
			}
			nul := indexNul(b[off:end])
			if nul < 0 {
				return nil, errors.New("index path not terminated")
			}
			path = append(append([]byte(nil), prev[:len(prev)-int(strip)]...), b[off:off+nul]...)
			off += nul + 1
		} else {
			nul := indexNul(b[off:end])
			if nul < 0 {
				return nil, errors.New("index path not terminated")
			}
			path = b[off : off+nul]
			// 1 to 8 NULs pad the entry to a multiple of 8.
			off = start + (off-start+nul+8)/8*8
			if off > end {
				return nil, errors.New("index entry padding exceeds the file")
			}
		}
		if mode&0o170000 == gitlinkMode {
			links = append(links, string(path))
		}
		prev = path
	}
	return links, nil
}

func indexNul(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

// indexVarint decodes git's offset varint (each continuation adds one).
func indexVarint(b []byte) (uint64, int, error) {
	if len(b) == 0 {
		return 0, 0, errors.New("index varint truncated")
	}
	c := b[0]
	v := uint64(c & 127)
	i := 1
	for c&128 != 0 {
		if i >= len(b) || i > 9 {
			return 0, 0, errors.New("index varint truncated")
		}
		v++
		c = b[i]
		v = v<<7 + uint64(c&127)
		i++
	}
	return v, i, nil
}
