package api

import (
	"sort"
	"strconv"
	"strings"

	"github.com/gpuctl/gpuctl/errs"
)

// Labels are a session's KEY=VALUE pairs: a scheduler's job id, a pod's
// name. They travel from the client (GPUCTL_LABELS, gpuctl run --label)
// in the handshake, stay with the session in its record and its images,
// and select sessions for gpuctl preempt and resume.
//
// A key is 1 to 63 characters of letters, digits and "-_./"; a value 0
// to 63 of the same (a Kubernetes label's characters, which cover Slurm
// job ids and pod names). At most MaxLabels pairs.
type Labels map[string]string

// Limits of labels, also what the handshake reads at most.
const (
	MaxLabels      = 16
	MaxLabelLen    = 63
	MaxLabelsBytes = MaxLabels * (2*MaxLabelLen + 2)
)

// ParseLabels parses "k=v,k2=v2" (the form of GPUCTL_LABELS and of a
// selector). An empty string is no labels.
func ParseLabels(s string) (Labels, error) {
	out := Labels{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return nil, errs.New(errs.InvalidArgument, "", "label %q: want KEY=VALUE", kv)
		}
		if err := CheckLabel(k, v); err != nil {
			return nil, err
		}
		if _, dup := out[k]; dup {
			return nil, errs.New(errs.InvalidArgument, "", "label %q is given twice", k)
		}
		out[k] = v
	}
	if len(out) > MaxLabels {
		return nil, errs.New(errs.InvalidArgument, "", "%d labels: at most %d", len(out), MaxLabels)
	}
	return out, nil
}

// CheckLabel checks one pair.
func CheckLabel(k, v string) error {
	if k == "" || len(k) > MaxLabelLen || !labelChars(k) {
		return errs.New(errs.InvalidArgument, "", "label key %q: want 1 to %d letters, digits or -_./", k, MaxLabelLen)
	}
	if len(v) > MaxLabelLen || !labelChars(v) {
		return errs.New(errs.InvalidArgument, "", "label %s: value %q: want up to %d letters, digits or -_./", k, v, MaxLabelLen)
	}
	return nil
}

func labelChars(s string) bool {
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == '/':
		default:
			return false
		}
	}
	return true
}

// String is the "k=v,k2=v2" form, keys in order.
func (l Labels) String() string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + l[k])
	}
	return b.String()
}

// Selector picks sessions by their labels: every pair must match. It is
// written as labels are ("job=42,user=ann").
type Selector Labels

// ParseSelector parses a selector; an empty one is refused, since it
// would pick every session.
func ParseSelector(s string) (Selector, error) {
	l, err := ParseLabels(s)
	if err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, "", "selector")
	}
	if len(l) == 0 {
		return nil, errs.New(errs.InvalidArgument, "", "empty selector: pass KEY=VALUE[,KEY=VALUE...]")
	}
	return Selector(l), nil
}

// Matches reports whether a session with labels l is selected.
func (s Selector) Matches(l Labels) bool {
	for k, v := range s {
		if got, ok := l[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (s Selector) String() string { return Labels(s).String() }

// ParsePriority parses a session priority: an integer, higher wins.
func ParsePriority(s string) (int32, error) {
	p, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
	if err != nil {
		return 0, errs.New(errs.InvalidArgument, "", "priority %q: want an integer between %d and %d", s, int32(-1<<31), int32(1<<31-1))
	}
	return int32(p), nil
}

// FormatLabels is the table form of labels: "-" for none.
func FormatLabels(l Labels) string {
	if len(l) == 0 {
		return "-"
	}
	return l.String()
}
