package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// fullJSON encodes a struct with every field its json tags name, in their
// order, a zero one included where its tag says omitempty: what postern
// prints has one shape per object, whatever the library type omits.
func fullJSON(v any) ([]byte, error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return json.Marshal(v)
	}
	rt := rv.Type()
	var b bytes.Buffer
	b.WriteByte('{')
	n := 0
	for i := range rt.NumField() {
		f := rt.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		val, err := json.Marshal(rv.Field(i).Interface())
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", name, err)
		}
		key, _ := json.Marshal(name)
		if n > 0 {
			b.WriteByte(',')
		}
		b.Write(key)
		b.WriteByte(':')
		b.Write(val)
		n++
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
