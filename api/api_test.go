package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/errs"
)

func TestDigestText(t *testing.T) {
	var d Digest
	for i := range d {
		d[i] = byte(i * 7)
	}
	b, err := json.Marshal(MissingChunksRequest{Digests: []Digest{d}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"digests":["` + d.String() + `"]}`; string(b) != want {
		t.Fatalf("encoded %s, want %s", b, want)
	}
	var back MissingChunksRequest
	if err := json.Unmarshal(b, &back); err != nil || len(back.Digests) != 1 || back.Digests[0] != d {
		t.Fatalf("round trip: %v %v", back, err)
	}
	for _, bad := range []string{`"zz"`, `"` + strings.Repeat("g", 64) + `"`, `"` + strings.Repeat("a", 66) + `"`} {
		var x Digest
		err := json.Unmarshal([]byte(bad), &x)
		if !errs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "chunk digest") {
			t.Errorf("decode %s: %v, want an invalid_argument error naming the digest", bad, err)
		}
	}
}

func TestVerifyReportErr(t *testing.T) {
	cases := []struct {
		name string
		rep  VerifyReport
		want string // substring; "" = no error
	}{
		{"clean", VerifyReport{Images: 2, Chunks: 9}, ""},
		{"index", VerifyReport{Index: "chunk x has a bad record"}, "chunk x has a bad record"},
		{"damaged", VerifyReport{Damaged: []DamagedChunk{{Chunk: "ab12", Images: []string{"img-1"}}, {Chunk: "cd34"}}},
			`image "img-1": chunk ab12 is damaged (2 damaged chunks in all)`},
		{"damaged, no image", VerifyReport{Damaged: []DamagedChunk{{Chunk: "ab12"}}}, "no image: chunk ab12"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.rep.Err()
			if c.rep.OK() != (c.want == "") {
				t.Errorf("OK() = %v", c.rep.OK())
			}
			if c.want == "" {
				if err != nil {
					t.Fatalf("err %v", err)
				}
				return
			}
			if !errs.Is(err, errs.DataLoss) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want data_loss containing %q", err, c.want)
			}
		})
	}
}

func TestErrorBodyKeepsTheKind(t *testing.T) {
	err := ErrorBody{Kind: errs.NotFound, Error: `session "s-1": no such session`}.Err()
	if !errs.IsNotFound(err) || err.Error() != `session "s-1": no such session` {
		t.Fatalf("%v (%s)", err, errs.KindOf(err))
	}
}
