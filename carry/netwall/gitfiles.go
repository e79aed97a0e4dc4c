package netwall

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// What a commit, a merge, a fetch or a checkout writes at the top of a git
// directory, which git takes as data only: these, and nothing else there,
// are copied back from the run's layer at its end, each once it passes its
// check. Everything else at the top (config, hooks, info, commondir,
// modules, worktrees, ...) git obeys or follows, and stays in the layer. An
// unfinished rebase or cherry-pick sequence (rebase-merge, sequencer, whose
// todo lists run commands) stays there too.

// gitTopFile returns the check of a top file a commit may write, or false for
// a name that is not one.
func gitTopFile(name string) (func([]byte) error, bool) {
	switch name {
	case "HEAD":
		return checkHead, true
	case "ORIG_HEAD", "MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "REBASE_HEAD", "AUTO_MERGE", "BISECT_HEAD", "shallow":
		return checkIDLines, true
	case "FETCH_HEAD":
		return checkFetchHead, true
	case "COMMIT_EDITMSG", "MERGE_MSG", "MERGE_MODE", "SQUASH_MSG", "TAG_EDITMSG":
		return checkMessage, true
	case "packed-refs":
		return checkPackedRefs, true
	case "index":
		return checkIndex, true
	}
	if rest, ok := strings.CutPrefix(name, "sharedindex."); ok && isObjectID(rest) {
		return checkIndex, true
	}
	return nil, false
}

// Sizes past which a top file is not copied back.
const (
	maxGitText  = 1 << 20
	maxGitRefs  = 256 << 20
	maxGitIndex = 2 << 30
)

var errGitSize = errors.New("larger than git writes it")

func isObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// checkRefName accepts what git allows in a reference name under refs/.
func checkRefName(s string) error {
	if !strings.HasPrefix(s, "refs/") || strings.Contains(s, "..") || strings.Contains(s, "//") ||
		strings.HasSuffix(s, "/") || strings.HasSuffix(s, ".lock") || strings.Contains(s, "@{") {
		return fmt.Errorf("%q is not a reference name", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c == 0x7f || strings.IndexByte("~^:?*[\\", c) >= 0 {
			return fmt.Errorf("%q is not a reference name", s)
		}
	}
	return nil
}

func lines(b []byte) []string {
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func checkHead(b []byte) error {
	if len(b) > 4096 {
		return errGitSize
	}
	l := lines(b)
	if len(l) != 1 {
		return errors.New("HEAD is one line")
	}
	if ref, ok := strings.CutPrefix(l[0], "ref: "); ok {
		return checkRefName(ref)
	}
	if !isObjectID(l[0]) {
		return fmt.Errorf("%q is neither a reference nor an object id", l[0])
	}
	return nil
}

func checkIDLines(b []byte) error {
	if len(b) > maxGitText {
		return errGitSize
	}
	for _, l := range lines(b) {
		if !isObjectID(l) {
			return fmt.Errorf("%q is not an object id", l)
		}
	}
	return nil
}

func checkFetchHead(b []byte) error {
	if len(b) > maxGitText {
		return errGitSize
	}
	for _, l := range lines(b) {
		id, _, ok := strings.Cut(l, "\t")
		if !ok || !isObjectID(id) {
			return fmt.Errorf("%q does not start with an object id and a tab", l)
		}
	}
	return nil
}

// checkMessage accepts any text: git shows it as a message, nothing more.
func checkMessage(b []byte) error {
	if len(b) > maxGitText {
		return errGitSize
	}
	if bytes.IndexByte(b, 0) >= 0 {
		return errors.New("a message holds no NUL byte")
	}
	return nil
}

func checkPackedRefs(b []byte) error {
	if len(b) > maxGitRefs {
		return errGitSize
	}
	for i, l := range lines(b) {
		switch {
		case i == 0 && strings.HasPrefix(l, "# pack-refs with:"):
		case strings.HasPrefix(l, "^"):
			if !isObjectID(l[1:]) {
				return fmt.Errorf("%q is not a peeled object id", l)
			}
		default:
			id, ref, ok := strings.Cut(l, " ")
			if !ok || !isObjectID(id) {
				return fmt.Errorf("%q is not an object id and a reference", l)
			}
			if err := checkRefName(ref); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkIndex accepts a git index: its signature, a version git writes, and
// its trailing checksum (SHA-1 or SHA-256, or zero when index.skipHash is set).
func checkIndex(b []byte) error {
	if len(b) > maxGitIndex {
		return errGitSize
	}
	if len(b) < 12+20 || string(b[:4]) != "DIRC" {
		return errors.New("not a git index (no DIRC signature)")
	}
	if v := binary.BigEndian.Uint32(b[4:8]); v < 2 || v > 4 {
		return fmt.Errorf("index version %d is not one git writes", v)
	}
	for _, n := range []int{sha1.Size, sha256.Size} {
		if len(b) < 12+n {
			continue
		}
		body, sum := b[:len(b)-n], b[len(b)-n:]
		if bytes.Equal(sum, make([]byte, n)) {
			return nil
		}
		var got []byte
		if n == sha1.Size {
			s := sha1.Sum(body)
			got = s[:]
		} else {
			s := sha256.Sum256(body)
			got = s[:]
		}
		if bytes.Equal(got, sum) {
			return nil
		}
	}
	return errors.New("the index's checksum does not match")
}
