package machine

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// AgentFile is what the controller measured of the remote agent's file
// installed on a machine, over sftp.
type AgentFile struct {
	Dir  string `json:"dir"`  // the agent directory as configured ("" is DefaultDir)
	Path string `json:"path"` // the file's absolute path on the remote
	Hash string `json:"hash"` // sha256 of its content when measured (hex)
	Size int64  `json:"size"`
	// Mode is the file's type and permissions (os.FileMode bits).
	Mode       uint32    `json:"mode"`
	UID        uint32    `json:"uid"`
	GID        uint32    `json:"gid"`
	Mtime      int64     `json:"mtime"` // Unix seconds: sftp shows no finer
	MeasuredAt time.Time `json:"measured_at"`
}

// Regular reports whether the file is a regular file.
func (s AgentFile) Regular() bool { return os.FileMode(s.Mode).IsRegular() }

// SameFile reports whether every attribute sftp shows is as recorded.
func (s AgentFile) SameFile(o AgentFile) bool {
	return s.Path == o.Path && s.Size == o.Size && s.Mode == o.Mode && s.UID == o.UID && s.GID == o.GID && s.Mtime == o.Mtime
}

// Differences says how now differs from s, the recorded state.
func (s AgentFile) Differences(now AgentFile) string {
	var d []string
	if now.Mode != s.Mode {
		d = append(d, fmt.Sprintf("mode %s, was %s", os.FileMode(now.Mode), os.FileMode(s.Mode)))
	}
	if now.Size != s.Size {
		d = append(d, fmt.Sprintf("size %d, was %d", now.Size, s.Size))
	}
	if now.UID != s.UID || now.GID != s.GID {
		d = append(d, fmt.Sprintf("owner %d:%d, was %d:%d", now.UID, now.GID, s.UID, s.GID))
	}
	if now.Mtime != s.Mtime {
		d = append(d, fmt.Sprintf("modified %s, was %s", time.Unix(now.Mtime, 0).UTC().Format(time.RFC3339), time.Unix(s.Mtime, 0).UTC().Format(time.RFC3339)))
	}
	return strings.Join(d, ", ")
}
