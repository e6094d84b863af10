package keyfunc

import "testing"

type benchReq struct {
	From, To string
	Amount   int64
	Labels   map[string]string
}

func benchTemplate[In any](b *testing.B, text string, sources Sources[In], in In) {
	b.Helper()
	tpl, err := Parse(text, sources)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tpl.Render(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRender(b *testing.B) {
	req := benchReq{From: "acct-1", To: "acct-2", Amount: 12345, Labels: map[string]string{"tenant": "t1"}}
	b.Run("struct-2-strings", func(b *testing.B) {
		benchTemplate(b, "transfer:{req.From}:{req.To}", Sources[benchReq]{"req": FieldSource[benchReq]()}, req)
	})
	b.Run("pointer-2-strings", func(b *testing.B) {
		benchTemplate(b, "transfer:{req.From}:{req.To}", Sources[*benchReq]{"req": FieldSource[*benchReq]()}, &req)
	})
	b.Run("struct-string-int", func(b *testing.B) {
		benchTemplate(b, "transfer:{req.From}:{req.Amount}", Sources[benchReq]{"req": FieldSource[benchReq]()}, req)
	})
	b.Run("struct-map", func(b *testing.B) {
		benchTemplate(b, "tenant:{req.Labels.tenant}:{req.From}", Sources[benchReq]{"req": FieldSource[benchReq]()}, req)
	})
	b.Run("escaped", func(b *testing.B) {
		r := req
		r.From = "a:b:c"
		benchTemplate(b, "transfer:{req.From}:{req.To}", Sources[benchReq]{"req": FieldSource[benchReq]()}, r)
	})
}
