package fieldtest

import "testing"

func TestParseList(t *testing.T) {
	for _, ok := range []string{
		`"burst";q=100;w=60, "daily";q=1000;w=86400`,
		` "a";r=0;t=1 ,	"b" `,
		`tok;x;y=?0;z=:aGk=:;d=1.5;e=-2;s="x\"y";ds=%"caf%c3%a9"`,
	} {
		if _, err := ParseList(ok); err != nil {
			t.Errorf("ParseList(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{
		"\"tab\there\";q=1",
		"\"caf\xc3\xa9\";q=1",
		`"a\n";q=1`,
		`"a";q=1,`,
		`"a";q=1,,"b"`,
		`"a";Q=1`,
		`"a";q=1234567890123456`,
		`"a";q=1.2345`,
		`"a"x`,
		`"a`,
		`("a" "b")`,
		`"a";q=1 "b"`,
	} {
		if items, err := ParseList(bad); err == nil {
			t.Errorf("ParseList(%q) = %#v, want an error", bad, items)
		}
	}
	items, err := ParseList(`"a";q=5;w=60`)
	if err != nil || len(items) != 1 || items[0].Value != "a" {
		t.Fatalf("%#v, %v", items, err)
	}
	if q, _ := items[0].Param("q"); q != int64(5) {
		t.Errorf("q = %#v", q)
	}
}
