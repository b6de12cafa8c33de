package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
)

// gcpColumns are the columns ParseGCPPrices needs, by header name.
var gcpColumns = []string{"commit_date_utc", "machine_type", "region", "hour_ondemand_usd", "hour_spot_usd"}

// ParseGCPPrices reads a gcp_spot_price_changes_*.csv change-log: each row
// gives a (machine_type, region)'s on-demand and spot prices from the time
// the snapshot was committed (commit_date_utc) on. It returns a spot and an
// on-demand series per (machine_type, region). An empty price cell means the
// price was absent from that snapshot: a NaN step. name is used only in
// errors.
func ParseGCPPrices(name string, r io.Reader) (Prices, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &ParseError{File: name, Line: 1, Err: errors.New("empty file, want a header")}
		}
		return nil, csvError(name, err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	for _, c := range gcpColumns {
		if _, ok := col[c]; !ok {
			return nil, &ParseError{File: name, Line: 1, Field: c, Err: errors.New("missing column")}
		}
	}
	cr.FieldsPerRecord = len(header)
	p := Prices{}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, csvError(name, err)
		}
		line, _ := cr.FieldPos(0)
		fail := func(field string, err error) error {
			return &ParseError{File: name, Line: line, Field: field, Err: err}
		}
		t, err := time.Parse(time.RFC3339, rec[col["commit_date_utc"]])
		if err != nil {
			return nil, fail("commit_date_utc", err)
		}
		mt, region := rec[col["machine_type"]], rec[col["region"]]
		if mt == "" {
			return nil, fail("machine_type", errors.New("empty"))
		}
		if region == "" {
			return nil, fail("region", errors.New("empty"))
		}
		for _, m := range []struct {
			column string
			market Market
		}{{"hour_spot_usd", Spot}, {"hour_ondemand_usd", OnDemand}} {
			v, err := parseUSD(rec[col[m.column]], true)
			if err != nil {
				return nil, fail(m.column, err)
			}
			p.add(Key{Provider: "gcp", InstanceType: mt, Zone: region, Market: m.market}, Price{Time: t, USDPerHour: v})
		}
	}
	p.sortSteps()
	return p, nil
}

// parseUSD parses a non-negative finite price; "" is NaN when allowEmpty.
func parseUSD(s string, allowEmpty bool) (float64, error) {
	if s == "" {
		if allowEmpty {
			return math.NaN(), nil
		}
		return 0, errors.New("empty")
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("%q is not a non-negative price", s)
	}
	return v, nil
}

func csvError(name string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &ParseError{File: name, Line: pe.Line, Col: pe.Column, Err: pe.Err}
	}
	return &ParseError{File: name, Err: err}
}
