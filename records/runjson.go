package records

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendRunJSON writes a run as encoding/json writes it through Run's
// MarshalJSON: every key in the order of Run's fields, ended_at last (the
// key that replaces EndedAt comes after the fields it was embedded beside),
// strings escaped as encoding/json escapes them. It is written out because
// encoding/json spends some 0.4 ms building its encoder for Run the first
// time a process writes one, and every `postern run` is such a process,
// waiting for its running record to be on disk before the command starts.
// TestRunJSONAsEncodingJSON holds it to encoding/json, field by field.
func appendRunJSON(b []byte, r *Run) ([]byte, error) {
	var err error
	b = append(b, `{"id":`...)
	b = appendJSONString(b, r.ID)
	b = append(b, `,"machine":`...)
	b = appendJSONString(b, r.Machine)
	b = append(b, `,"lane":`...)
	b = appendJSONString(b, string(r.Lane))
	b = append(b, `,"carry":`...)
	b = appendJSONString(b, string(r.Carry))
	b = append(b, `,"state":`...)
	b = appendJSONString(b, string(r.State))
	b = append(b, `,"exit_code":`...)
	if r.ExitCode == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, int64(*r.ExitCode), 10)
	}
	b = append(b, `,"command":`...)
	b = appendJSONStrings(b, r.Command, "[]")
	b = append(b, `,"dir":`...)
	b = appendJSONString(b, r.Dir)
	b = append(b, `,"policy":`...)
	b = appendJSONString(b, r.Policy)
	b = append(b, `,"mode":`...)
	b = appendJSONString(b, r.Mode)
	b = append(b, `,"egress_open_reason":`...)
	b = appendJSONString(b, r.EgressOpenReason)
	b = append(b, `,"started_at":`...)
	if b, err = appendJSONTime(b, r.StartedAt); err != nil {
		return nil, err
	}
	b = append(b, `,"allowed":`...)
	b = strconv.AppendInt(b, int64(r.Allowed), 10)
	b = append(b, `,"denied":`...)
	b = strconv.AppendInt(b, int64(r.Denied), 10)
	b = append(b, `,"would_deny":`...)
	b = strconv.AppendInt(b, int64(r.WouldDeny), 10)
	b = append(b, `,"why":`...)
	b = appendJSONString(b, r.Why)
	b = append(b, `,"landlock":`...)
	b = appendJSONString(b, r.Landlock)
	b = append(b, `,"dispatch":`...)
	b = appendJSONString(b, r.Dispatch)
	b = append(b, `,"task":`...)
	b = appendJSONString(b, r.Task)
	b = append(b, `,"guarded":`...)
	b = appendJSONStrings(b, r.Guarded, "[]")
	b = append(b, `,"writes":`...)
	b = appendJSONStrings(b, r.Writes, "[]")
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, int64(r.Pid), 10)
	b = append(b, `,"pid_start":`...)
	b = strconv.AppendUint(b, r.PidStart, 10)
	b = append(b, `,"events_dropped":`...)
	b = strconv.AppendInt(b, int64(r.EventsDropped), 10)
	b = append(b, `,"events_lost":`...)
	b = strconv.AppendInt(b, int64(r.EventsLost), 10)
	b = append(b, `,"events_error":`...)
	b = appendJSONString(b, r.EventsError)
	b = append(b, `,"network":`...)
	b = appendJSONString(b, r.Network)
	b = append(b, `,"seal":`...)
	if r.Seal == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"held":`...)
		b = strconv.AppendBool(b, r.Seal.Held)
		b = append(b, `,"guardrail":`...)
		b = appendJSONString(b, r.Seal.Guardrail)
		b = append(b, `,"why":`...)
		b = appendJSONString(b, r.Seal.Why)
		b = append(b, '}')
	}
	b = append(b, `,"policy_sha256":`...)
	b = appendJSONString(b, r.PolicySHA256)
	b = append(b, `,"policy_text":`...)
	b = appendJSONString(b, r.PolicyText)
	b = append(b, `,"policy_text_cut":`...)
	b = strconv.AppendBool(b, r.PolicyTextCut)
	b = append(b, `,"run_pid":`...)
	b = strconv.AppendInt(b, int64(r.RunPid), 10)
	b = append(b, `,"env_names":`...)
	b = appendJSONStrings(b, r.EnvNames, "null")
	b = append(b, `,"end":`...)
	b = appendJSONString(b, r.End)
	b = append(b, `,"workspace":`...)
	if r.Workspace == nil {
		b = append(b, "null"...)
	} else {
		// Only a run with a workspace, which takes far longer than the
		// encoder's making, writes one.
		w, err := json.Marshal(r.Workspace)
		if err != nil {
			return nil, err
		}
		b = append(b, w...)
	}
	b = append(b, `,"ended_at":`...)
	if r.EndedAt.IsZero() {
		b = append(b, "null"...)
	} else if b, err = appendJSONTime(b, r.EndedAt); err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

func appendJSONTime(b []byte, t time.Time) ([]byte, error) {
	j, err := t.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return append(b, j...), nil
}

// appendJSONStrings writes a list of strings; none is written as null (what
// encoding/json writes for a nil slice) or as [].
func appendJSONStrings(b []byte, ss []string, none string) []byte {
	if ss == nil {
		return append(b, none...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// appendJSONString quotes s as encoding/json does by default: ", \ and the
// control characters escaped (\b \f \n \r \t by name, the rest as \u00XX),
// and <, > and & as \u00XX too; invalid UTF-8 as \ufffd; U+2028 and U+2029
// as \u2028 and \u2029.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
