package images

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"github.com/gpuctl/gpuctl/api"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images/imagegen"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/store"
)

func zstdJSON(t testing.TB, js string) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll([]byte(js), nil)
}

var h200 = []backend.GPU{
	{Index: 0, Name: "NVIDIA H200", UUID: "GPU-aaaa", MemoryBytes: 150754820096, PCIBusID: "00000000:18:00.0"},
	{Index: 1, Name: "NVIDIA H200", UUID: "GPU-bbbb", MemoryBytes: 150754820096, PCIBusID: "00000000:19:00.0"},
}

// TestManifestV2Format pins the JSON that version 2 writes, GPU records
// included: the manifest is a stored and exported format, so a renamed
// field must be a new version, not an accident.
func TestManifestV2Format(t *testing.T) {
	m := &Manifest{
		Version: ManifestVersion,
		Meta: Meta{ID: "img-1", Session: "s-0123456789ab", Parent: "img-0", Host: "hostA", Backend: "cuda",
			GPUs: h200[:1], Driver: "580.159.04", CRIU: "4.1.1", Kernel: "6.18.0", AttachNonce: "9c0e", Epoch: 3,
			Labels: map[string]string{"team": "x"}, Tenant: "alice"},
		Created:  time.Date(2026, 11, 30, 3, 10, 0, 0, time.UTC),
		Chunking: "page-cdc/4096-16384-131072",
		Files:    []File{{Path: "gpu", Type: TypeDir, Mode: 0o755}},
	}
	got, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":2,"id":"img-1","session":"s-0123456789ab","parent":"img-0","host":"hostA","backend":"cuda",` +
		`"gpus":[{"index":0,"name":"NVIDIA H200","uuid":"GPU-aaaa","memory_bytes":150754820096,"pci_bus_id":"00000000:18:00.0"}],` +
		`"driver":"580.159.04","criu":"4.1.1","kernel":"6.18.0","attach_nonce":"9c0e","epoch":3,"labels":{"team":"x"},"tenant":"alice",` +
		`"created":"2026-11-30T03:10:00Z","chunking":"page-cdc/4096-16384-131072",` +
		`"files":[{"path":"gpu","type":"dir","mode":493,"size":0}]}`
	if string(got) != want {
		t.Errorf("version 2 manifest:\n got %s\nwant %s", got, want)
	}
	back, err := decodeManifest(zstdJSON(t, string(got)))
	if err != nil || !reflect.DeepEqual(back, m) {
		t.Fatalf("decode: %+v, %v", back, err)
	}
}

// v1 is a manifest as gpud wrote it before version 2: GPUs as model and
// UUID, their full records in the gpuctl.gpus label (a JSON string).
func v1(t testing.TB, gpus, labels string) string {
	t.Helper()
	return `{"version":1,"id":"img-old","session":"s-0123456789ab","host":"hostA","backend":"cuda",` +
		`"gpus":` + gpus + `,"driver":"580.159.04","criu":"4.1.1","kernel":"6.18.0","attach_nonce":"9c0e",` +
		labels + `"created":"2026-11-30T03:10:00Z","chunking":"page-cdc/4096-16384-131072",` +
		`"files":[{"path":"gpu","type":"dir","mode":493,"size":0}]}`
}

func TestManifestVersions(t *testing.T) {
	v1GPUs := `[{"model":"NVIDIA H200","uuid":"GPU-aaaa"},{"model":"NVIDIA H200","uuid":"GPU-bbbb"}]`
	label, _ := json.Marshal(h200)
	labelJSON, _ := json.Marshal(string(label))
	cases := []struct {
		name       string
		js         string
		wantGPUs   []backend.GPU
		wantLabels map[string]string
		wantEpoch  uint64
		wantErr    string
	}{
		{name: "v1 with the GPU label: full records, label dropped",
			js:       v1(t, v1GPUs, `"labels":{"gpuctl.gpus":`+string(labelJSON)+`,"team":"x"},`),
			wantGPUs: h200, wantLabels: map[string]string{"team": "x"}},
		{name: "v1 with only the GPU label",
			js:       v1(t, v1GPUs, `"labels":{"gpuctl.gpus":`+string(labelJSON)+`},`),
			wantGPUs: h200},
		{name: "v1 without the label: models and UUIDs, numbered",
			js:       v1(t, v1GPUs, ""),
			wantGPUs: []backend.GPU{{Index: 0, Name: "NVIDIA H200", UUID: "GPU-aaaa"}, {Index: 1, Name: "NVIDIA H200", UUID: "GPU-bbbb"}}},
		{name: "v1 of the emulated backend, no GPUs", js: v1(t, `[]`, "")},
		// gpuds with fencing wrote the epoch before version 2 existed.
		{name: "v1 with an epoch keeps it",
			js:       v1(t, v1GPUs, `"epoch":7,`),
			wantGPUs: []backend.GPU{{Index: 0, Name: "NVIDIA H200", UUID: "GPU-aaaa"}, {Index: 1, Name: "NVIDIA H200", UUID: "GPU-bbbb"}}, wantEpoch: 7},
		{name: "v1 with a broken GPU label",
			js: v1(t, v1GPUs, `"labels":{"gpuctl.gpus":"[{\"index\":"},`), wantErr: "label gpuctl.gpus is not a list of GPUs"},
		{name: "v2 does not take v1's GPU form",
			js: strings.Replace(v1(t, v1GPUs, ""), `"version":1`, `"version":2`, 1), wantErr: `unknown field "model"`},
		{name: "v1 does not take v2's GPU form",
			js: v1(t, `[{"name":"NVIDIA H200","uuid":"GPU-aaaa"}]`, ""), wantErr: `unknown field "name"`},
		{name: "v1 has no tenant",
			js: v1(t, v1GPUs, `"tenant":"alice",`), wantErr: "manifest version 1 has no tenant field"},
		{name: "v2 refuses a tenant name that is not one",
			js: strings.Replace(v1(t, `[]`, `"tenant":"Not A Tenant",`), `"version":1`, `"version":2`, 1), wantErr: `tenant name "Not A Tenant"`},
		{name: "a later version",
			js: strings.Replace(v1(t, v1GPUs, ""), `"version":1`, `"version":3`, 1), wantErr: "manifest version 3; this gpud reads versions 1 to 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := decodeManifest(zstdJSON(t, c.js))
			if c.wantErr != "" {
				if !errs.IsInvalidArgument(err) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got %v, want an invalid argument containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Version != ManifestVersion || !reflect.DeepEqual(m.GPUs, c.wantGPUs) || !reflect.DeepEqual(m.Labels, c.wantLabels) || m.Epoch != c.wantEpoch {
				t.Errorf("version %d GPUs %+v labels %v epoch %d", m.Version, m.GPUs, m.Labels, m.Epoch)
			}
			if m.ID != "img-old" || m.Tenant != "" || m.Driver != "580.159.04" || m.CRIU != "4.1.1" || m.AttachNonce != "9c0e" || len(m.Files) != 1 {
				t.Errorf("other fields lost: %+v", m)
			}
		})
	}
}

// TestOldImageRestores puts a version 1 manifest, as gpud wrote it before
// version 2, into a store beside its chunks, and checks it out: the files
// come back and the GPUs carry memory and PCI bus from the old label, as
// the restore pipeline needs them. An export of it is a version 2 image.
func TestOldImageRestores(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	src := dumpDir(t, imagegen.Pages(7, 1<<20, imagegen.Realistic))
	cur, _, err := Commit(ctx, st, src, Meta{Session: "s-0123456789ab", Backend: "cuda", AttachNonce: "9c0e"})
	if err != nil {
		t.Fatal(err)
	}

	// The manifest an older gpud wrote for the same files.
	var old map[string]any
	b, _ := json.Marshal(cur)
	if err := json.Unmarshal(b, &old); err != nil {
		t.Fatal(err)
	}
	label, _ := json.Marshal(h200)
	old["version"], old["id"] = 1, "img-old"
	old["gpus"] = []map[string]string{{"model": h200[0].Name, "uuid": h200[0].UUID}, {"model": h200[1].Name, "uuid": h200[1].UUID}}
	old["labels"] = map[string]string{"gpuctl.gpus": string(label)}
	js, _ := json.Marshal(old)
	refs, _ := cur.Refs()
	in := st.NewIngest()
	defer in.Abort()
	if missing, err := in.Require(ctx, refs); err != nil || len(missing) > 0 {
		t.Fatalf("require: %v, %d missing", err, len(missing))
	}
	info, _ := json.Marshal(api.Image{ID: "img-old", Session: "s-0123456789ab", Created: cur.Created})
	if err := in.Commit(ctx, &store.ImageRecord{ID: "img-old", Info: info, Manifest: zstdJSON(t, string(js)), Refs: refs}); err != nil {
		t.Fatal(err)
	}

	dst := filepath.Join(t.TempDir(), "out")
	m, err := Checkout(ctx, st, "img-old", dst)
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, src, dst)
	if !reflect.DeepEqual(m.GPUs, h200) || m.Labels != nil || m.AttachNonce != "9c0e" || m.Version != ManifestVersion {
		t.Errorf("old image read as %+v", m.Meta)
	}

	var exp bytes.Buffer
	if _, err := Export(ctx, st, "img-old", &exp, nil); err != nil {
		t.Fatal(err)
	}
	other := openStore(t)
	imp, _, err := Import(ctx, other, &exp, ImportOptions{})
	if err != nil || !reflect.DeepEqual(imp.GPUs, h200) {
		t.Fatalf("import of the old image's export: %+v, %v", imp, err)
	}
	_, body, err := other.GetImage(ctx, "img-old")
	if err != nil {
		t.Fatal(err)
	}
	dec, _ := zstd.NewReader(nil)
	defer dec.Close()
	raw, err := dec.DecodeAll(body, nil)
	if err != nil || !bytes.Contains(raw, []byte(`"version":2`)) || bytes.Contains(raw, []byte("gpuctl.gpus")) {
		t.Errorf("the imported copy's manifest: %s, %v", raw, err)
	}
}

// TestChunkJSON checks the hand-parsed form of a chunk against the
// general decoder: the forms MarshalJSON writes come out the same, other
// valid spellings still decode, and malformed ones are refused.
func TestChunkJSON(t *testing.T) {
	var d store.Digest
	for i := range d {
		d[i] = byte(i * 7)
	}
	hexd := hex.EncodeToString(d[:])
	for _, tc := range []struct {
		name, in string
		want     Chunk
		err      bool
	}{
		{"zero", `[65536]`, Chunk{Size: 65536, Zero: true}, false},
		{"digest", `[1048576,"` + hexd + `"]`, Chunk{Size: 1 << 20, Digest: d}, false},
		{"spaces", `[ 1048576 , "` + hexd + `" ]`, Chunk{Size: 1 << 20, Digest: d}, false},
		{"upper-case digest", `[7,"` + strings.ToUpper(hexd) + `"]`, Chunk{Size: 7, Digest: d}, false},
		{"size 0", `[0]`, Chunk{Size: 0, Zero: true}, false},
		{"short digest", `[7,"abcd"]`, Chunk{}, true},
		{"not hex", `[7,"` + strings.Repeat("zz", len(d)) + `"]`, Chunk{}, true},
		{"three fields", `[7,"` + hexd + `",1]`, Chunk{}, true},
		{"empty", `[]`, Chunk{}, true},
		{"size a string", `["7"]`, Chunk{}, true},
		{"leading zero", `[07]`, Chunk{}, true},
		{"too large", `[123456789012345678901234]`, Chunk{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Chunk
			err := c.UnmarshalJSON([]byte(tc.in))
			if tc.err {
				if err == nil {
					t.Fatalf("%s decoded to %+v; want an error", tc.in, c)
				}
				return
			}
			if err != nil || c != tc.want {
				t.Fatalf("%s: %+v, %v; want %+v", tc.in, c, err, tc.want)
			}
			// What MarshalJSON writes reads back the same.
			b, _ := tc.want.MarshalJSON()
			var back Chunk
			if err := back.UnmarshalJSON(b); err != nil || back != tc.want {
				t.Fatalf("round trip of %s: %+v, %v", b, back, err)
			}
		})
	}
}
