package api

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"meshd/agent"
	"meshd/steward"
)

// A serve's reply is written straight from the sealed receipt: the same
// bytes as encoding/json makes of serveReply (the tests hold them equal),
// without building the receipt's map, walking structs by reflection for
// every reply or compacting a Marshaler's output. It was most of what the
// handler spent after the receipt's fsync, on the critical path of every
// serve.

// sortedReceiptFields are receiptFieldNames in the order a JSON object of
// them is written (encoding/json sorts a map's keys), each with its key
// quoted.
var sortedReceiptFields = func() []sortedField {
	out := make([]sortedField, 0, len(receiptFieldNames))
	for _, rf := range receiptFieldNames {
		key, _ := json.Marshal(rf.name)
		out = append(out, sortedField{rf, string(key) + ":"})
	}
	slices.SortFunc(out, func(a, b sortedField) int { return strings.Compare(a.name, b.name) })
	return out
}()

type sortedField struct {
	receiptField
	key string // `"name":`
}

// appendReceiptFields appends r's fields as Fields(ReceiptFields(r))
// encodes them. A receipt with foreign extensions takes the map's way,
// which merges them.
func appendReceiptFields(out []byte, r *steward.Receipt) ([]byte, error) {
	if len(r.Foreign) > 0 {
		b, err := Fields(ReceiptFields(r)).MarshalJSON()
		return append(out, b...), err
	}
	v := reflect.ValueOf(r).Elem()
	out = append(out, '{')
	first := true
	for _, sf := range sortedReceiptFields {
		f := v.Field(sf.index)
		if f.Kind() == reflect.Pointer {
			if f.IsNil() {
				continue
			}
			f = f.Elem()
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, sf.key...)
		var err error
		if out, err = appendReflected(out, f); err != nil {
			return nil, err
		}
	}
	return append(out, '}'), nil
}

// appendReflected appends f's JSON: a value of a predeclared integer,
// string or boolean type directly, anything else (a named type may
// marshal itself) through encoding/json.
func appendReflected(out []byte, f reflect.Value) ([]byte, error) {
	if f.Type().PkgPath() == "" {
		switch f.Kind() {
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			return strconv.AppendUint(out, f.Uint(), 10), nil
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			return strconv.AppendInt(out, f.Int(), 10), nil
		case reflect.String:
			return appendJSONString(out, f.String())
		case reflect.Bool:
			return strconv.AppendBool(out, f.Bool()), nil
		}
	}
	return appendEncoded(out, f.Interface())
}

// appendServeReply appends the JSON of newServeReply(resp, settling) and
// its newline, as encodeJSON writes it.
func appendServeReply(out []byte, resp *agent.Response, settling error) ([]byte, error) {
	sd := resp.Sealed
	rc := sd.Receipt
	var err error
	out = append(out, `{"text":`...)
	if out, err = appendJSONString(out, string(resp.Output)); err != nil {
		return nil, err
	}
	out = append(out, `,"outcome":{"tokens_accepted":`...)
	out = strconv.AppendUint(out, uint64(rc.TokensAccepted), 10)
	out = append(out, `,"tokens_in":`...)
	out = strconv.AppendUint(out, uint64(rc.TokensIn), 10)
	out = append(out, `,"tokens_out":`...)
	out = strconv.AppendUint(out, uint64(rc.TokensOut), 10)
	out = append(out, `},"backend":`...)
	if out, err = appendJSONString(out, rc.Backend); err != nil {
		return nil, err
	}
	out = append(out, `,"route":`...)
	if out, err = appendJSONString(out, rc.Route); err != nil {
		return nil, err
	}
	out = append(out, `,"receipt":{"id":`...)
	if out, err = appendJSONString(out, sd.ID.String()); err != nil {
		return nil, err
	}
	out = append(out, `,"sequence":`...)
	out = strconv.AppendUint(out, rc.Sequence, 10)
	out = append(out, `,"receipt":`...)
	if out, err = appendReceiptFields(out, rc); err != nil {
		return nil, err
	}
	out = append(out, `,"envelope":"`...)
	out = base64.StdEncoding.AppendEncode(out, sd.Envelope)
	out = append(out, '"')
	if cs := RouteCandidates(rc); len(cs) > 0 {
		out = append(out, `,"route_candidates":`...)
		if out, err = appendEncoded(out, cs); err != nil {
			return nil, err
		}
	}
	out = append(out, '}')
	if settling != nil {
		out = append(out, `,"settling_error":`...)
		if out, err = appendJSONString(out, settling.Error()); err != nil {
			return nil, err
		}
	}
	return append(out, "}\n"...), nil
}
