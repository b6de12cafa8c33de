package trace

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// awsSpotPrice is one element of describe-spot-price-history's
// SpotPriceHistory.
type awsSpotPrice struct {
	AvailabilityZone   string
	InstanceType       string
	ProductDescription string
	SpotPrice          string
	Timestamp          string
}

// ParseAWSPrices reads the JSON output of `aws ec2
// describe-spot-price-history`: {"SpotPriceHistory": [{"AvailabilityZone",
// "InstanceType", "ProductDescription", "SpotPrice", "Timestamp"}, ...],
// "NextToken": ...}. It returns one spot series per (instance type, zone,
// product description). name is used only in errors.
func ParseAWSPrices(name string, r io.Reader) (Prices, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, &ParseError{File: name, Err: err}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	at := func(off int64, field string, err error) error {
		line, col := lineCol(data, off)
		return &ParseError{File: name, Line: line, Col: col, Field: field, Err: err}
	}
	wrap := func(err error) error {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return at(syn.Offset-1, "", err)
		}
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			return at(typ.Offset, "SpotPriceHistory[]."+typ.Field, fmt.Errorf("cannot use JSON %s as %s", typ.Value, typ.Type))
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return at(int64(len(data)), "", io.ErrUnexpectedEOF)
		}
		return at(dec.InputOffset(), "", err)
	}
	if tok, err := dec.Token(); err != nil {
		return nil, wrap(err)
	} else if tok != json.Delim('{') {
		return nil, at(0, "", errors.New("want a JSON object"))
	}
	p := Prices{}
	found := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, wrap(err)
		}
		key, _ := tok.(string)
		if key != "SpotPriceHistory" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, wrap(err)
			}
			continue
		}
		found = true
		off := dec.InputOffset()
		for off < int64(len(data)) && bytes.IndexByte([]byte(": \t\r\n"), data[off]) >= 0 {
			off++
		}
		if tok, err := dec.Token(); err != nil {
			return nil, wrap(err)
		} else if tok != json.Delim('[') {
			return nil, at(off, "SpotPriceHistory", errors.New("want an array"))
		}
		for i := 0; dec.More(); i++ {
			// InputOffset is at the end of the previous token; skip the
			// separator so that errors point at the element.
			off := dec.InputOffset()
			for off < int64(len(data)) && bytes.IndexByte([]byte(", \t\r\n"), data[off]) >= 0 {
				off++
			}
			var e awsSpotPrice
			if err := dec.Decode(&e); err != nil {
				return nil, wrap(err)
			}
			field := func(f string) string { return fmt.Sprintf("SpotPriceHistory[%d].%s", i, f) }
			if err := e.addTo(p, field); err != nil {
				var pe *ParseError
				errors.As(err, &pe)
				return nil, at(off, pe.Field, pe.Err)
			}
		}
		if _, err := dec.Token(); err != nil {
			return nil, wrap(err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, wrap(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, at(dec.InputOffset(), "", errors.New("data after the JSON object"))
	}
	if !found {
		return nil, at(0, "SpotPriceHistory", errors.New("missing"))
	}
	p.sortSteps()
	return p, nil
}

// addTo validates e and adds it to p; errors are *ParseError with Field set
// by field.
func (e awsSpotPrice) addTo(p Prices, field func(string) string) error {
	for _, f := range []struct{ name, v string }{
		{"AvailabilityZone", e.AvailabilityZone}, {"InstanceType", e.InstanceType},
		{"ProductDescription", e.ProductDescription}, {"Timestamp", e.Timestamp},
	} {
		if f.v == "" {
			return &ParseError{Field: field(f.name), Err: errors.New("missing or empty")}
		}
	}
	v, err := parseUSD(e.SpotPrice, false)
	if err != nil {
		return &ParseError{Field: field("SpotPrice"), Err: err}
	}
	t, err := time.Parse(time.RFC3339, e.Timestamp)
	if err != nil {
		return &ParseError{Field: field("Timestamp"), Err: err}
	}
	p.add(Key{Provider: "aws", InstanceType: e.InstanceType, Zone: e.AvailabilityZone,
		Product: e.ProductDescription, Market: Spot}, Price{Time: t.UTC(), USDPerHour: v})
	return nil
}

// ParseAWSPricesTSV reads the ericpauley/aws-spot-price-history TSV (already
// decompressed): no header, columns az_id, instance_type,
// product_description, spot_price, timestamp. Same result as ParseAWSPrices,
// with the zone an AZ id such as use1-az4.
func ParseAWSPricesTSV(name string, r io.Reader) (Prices, error) {
	cr := csv.NewReader(r)
	cr.Comma = '\t'
	cr.FieldsPerRecord = 5
	cr.LazyQuotes = true
	cr.ReuseRecord = true
	p := Prices{}
	columns := []string{"az_id", "instance_type", "product_description", "spot_price", "timestamp"}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, csvError(name, err)
		}
		line, _ := cr.FieldPos(0)
		e := awsSpotPrice{AvailabilityZone: rec[0], InstanceType: rec[1], ProductDescription: rec[2],
			SpotPrice: rec[3], Timestamp: rec[4]}
		field := func(f string) string {
			switch f {
			case "AvailabilityZone":
				return columns[0]
			case "InstanceType":
				return columns[1]
			case "ProductDescription":
				return columns[2]
			case "SpotPrice":
				return columns[3]
			}
			return columns[4]
		}
		if err := e.addTo(p, field); err != nil {
			var pe *ParseError
			errors.As(err, &pe)
			return nil, &ParseError{File: name, Line: line, Field: pe.Field, Err: pe.Err}
		}
	}
	p.sortSteps()
	return p, nil
}
