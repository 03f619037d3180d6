package chart

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// A PromQL check for the chart's rules and dashboard, written here rather than importing Prometheus's parser:
// github.com/prometheus/prometheus would bring a module of several hundred packages (its storage, its TSDB, its
// service discovery clients) into go.mod for one test. This parser accepts the language these expressions use —
// selectors with label matchers, range selectors, offset, aggregations with by/without before or after their
// arguments, function calls, binary operators with bool and precedence, numbers, strings, parentheses — and
// refuses anything else; it is stricter than Prometheus's, never looser, on what it accepts: an unknown function,
// an aggregation without its parameter (topk, quantile), a matcher's regular expression that does not compile
// (Prometheus's are RE2, as Go's), a duration that is not one, unbalanced brackets, a trailing token.
// What it does not check: types (a range vector where an instant one is wanted), and vector matching
// (on/ignoring/group_left are refused, as no expression here uses them).

// selector is a metric selector found in an expression: the metric name and its matchers.
type selector struct {
	metric   string
	matchers []matcher
}

type matcher struct{ label, op, value string }

// grouping is a by/without clause: the labels an aggregation keeps or drops.
type grouping struct {
	metric string // the first metric under the aggregation, for the check of its labels
	labels []string
}

// parsed is what a check of an expression reports: its selectors and groupings.
type parsed struct {
	selectors []selector
	groupings []grouping
}

// functions are PromQL's functions and their number of arguments (min, max; -1: any).
var functions = map[string][2]int{
	"abs": {1, 1}, "absent": {1, 1}, "absent_over_time": {1, 1}, "ceil": {1, 1}, "changes": {1, 1},
	"clamp_max": {2, 2}, "clamp_min": {2, 2}, "delta": {1, 1}, "deriv": {1, 1}, "floor": {1, 1},
	"histogram_quantile": {2, 2}, "idelta": {1, 1}, "increase": {1, 1}, "irate": {1, 1},
	"label_replace": {5, 5}, "rate": {1, 1}, "resets": {1, 1}, "round": {1, 2}, "scalar": {1, 1},
	"sort": {1, 1}, "sort_desc": {1, 1}, "time": {0, 0}, "timestamp": {1, 1}, "vector": {1, 1},
	"avg_over_time": {1, 1}, "min_over_time": {1, 1}, "max_over_time": {1, 1}, "sum_over_time": {1, 1},
	"count_over_time": {1, 1}, "last_over_time": {1, 1},
}

// aggregations are PromQL's aggregation operators; those that take a parameter first are marked.
var aggregations = map[string]bool{"sum": false, "min": false, "max": false, "avg": false, "count": false,
	"group": false, "stddev": false, "stdvar": false, "topk": true, "bottomk": true, "quantile": true, "count_values": true}

var binaryOps = map[string]int{"or": 1, "and": 2, "unless": 2, "==": 3, "!=": 3, ">": 3, "<": 3, ">=": 3, "<=": 3,
	"+": 4, "-": 4, "*": 5, "/": 5, "%": 5, "^": 6}

var duration = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)

type token struct {
	kind string // ident, number, string, range ([5m]), duration (5m), op, punct
	text string
}

func lex(expr string) ([]token, error) {
	var toks []token
	r := []rune(expr)
	for i := 0; i < len(r); {
		c := r[i]
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(r) && r[j] != c {
				if r[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(r) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			s := string(r[i : j+1])
			if c == '`' {
				s = strconv.Quote(s[1 : len(s)-1])
			} else if c == '\'' {
				s = strconv.Quote(strings.ReplaceAll(s[1:len(s)-1], `\'`, `'`))
			}
			v, err := strconv.Unquote(s)
			if err != nil {
				return nil, fmt.Errorf("string %s: %w", string(r[i:j+1]), err)
			}
			toks = append(toks, token{"string", v})
			i = j + 1
		case c == '[':
			j := strings.IndexRune(string(r[i:]), ']')
			if j < 0 {
				return nil, fmt.Errorf("unterminated range at %d", i)
			}
			d := string(r[i+1 : i+j])
			if !duration.MatchString(d) {
				return nil, fmt.Errorf("range [%s]: not a duration", d)
			}
			toks = append(toks, token{"range", d})
			i += j + 1
		case unicode.IsDigit(c) || (c == '.' && i+1 < len(r) && unicode.IsDigit(r[i+1])):
			j := i
			for j < len(r) && (unicode.IsDigit(r[j]) || r[j] == '.' || r[j] == 'e' || r[j] == 'E' ||
				((r[j] == '+' || r[j] == '-') && (r[j-1] == 'e' || r[j-1] == 'E'))) {
				j++
			}
			if k := j; k < len(r) && unicode.IsLetter(r[k]) { // a duration: offset 5m
				for k < len(r) && (unicode.IsLetter(r[k]) || unicode.IsDigit(r[k])) {
					k++
				}
				toks = append(toks, token{"duration", string(r[i:k])})
				i = k
				continue
			}
			if _, err := strconv.ParseFloat(string(r[i:j]), 64); err != nil {
				return nil, fmt.Errorf("number %s: %w", string(r[i:j]), err)
			}
			toks = append(toks, token{"number", string(r[i:j])})
			i = j
		case unicode.IsLetter(c) || c == '_' || c == ':':
			j := i
			for j < len(r) && (unicode.IsLetter(r[j]) || unicode.IsDigit(r[j]) || r[j] == '_' || r[j] == ':') {
				j++
			}
			toks = append(toks, token{"ident", string(r[i:j])})
			i = j
		default:
			two := ""
			if i+1 < len(r) {
				two = string(r[i : i+2])
			}
			switch {
			case two == "==" || two == "!=" || two == ">=" || two == "<=" || two == "=~" || two == "!~":
				toks = append(toks, token{"op", two})
				i += 2
			case strings.ContainsRune("+-*/%^<>=", c):
				toks = append(toks, token{"op", string(c)})
				i++
			case strings.ContainsRune("(){},", c):
				toks = append(toks, token{"punct", string(c)})
				i++
			default:
				return nil, fmt.Errorf("unexpected %q at %d", c, i)
			}
		}
	}
	return toks, nil
}

type parser struct {
	toks []token
	pos  int
	out  parsed
}

// checkPromQL parses expr, as Grafana would send it with its variables given (grafanaVars), and returns its
// selectors and groupings.
func checkPromQL(expr string) (parsed, error) {
	toks, err := lex(grafanaVars.Replace(expr))
	if err != nil {
		return parsed{}, err
	}
	p := &parser{toks: toks}
	if err := p.expr(0); err != nil {
		return parsed{}, err
	}
	if p.pos != len(p.toks) {
		return parsed{}, fmt.Errorf("unexpected %q after the expression", p.toks[p.pos].text)
	}
	return p.out, nil
}

// grafanaVars are the dashboard's variables, replaced as Grafana does before sending a query.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$namespace", ".*")

func (p *parser) peek() token {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return token{}
}

func (p *parser) next() token { t := p.peek(); p.pos++; return t }

func (p *parser) expect(text string) error {
	if t := p.next(); t.text != text {
		return fmt.Errorf("want %q, found %q", text, t.text)
	}
	return nil
}

// expr parses a binary expression whose operators bind tighter than minPrec.
func (p *parser) expr(minPrec int) error {
	if err := p.unary(); err != nil {
		return err
	}
	for {
		t := p.peek()
		prec, ok := binaryOps[t.text]
		if !ok || (t.kind != "op" && t.kind != "ident") || prec <= minPrec {
			return nil
		}
		p.next()
		if p.peek().text == "bool" {
			if prec != 3 {
				return fmt.Errorf("bool after %s", t.text)
			}
			p.next()
		}
		if n := p.peek().text; n == "on" || n == "ignoring" || n == "group_left" || n == "group_right" {
			return fmt.Errorf("vector matching (%s) is not checked here", n)
		}
		next := prec
		if t.text == "^" {
			next = prec - 1 // right-associative
		}
		if err := p.expr(next); err != nil {
			return err
		}
	}
}

func (p *parser) unary() error {
	if t := p.peek(); t.text == "-" || t.text == "+" {
		p.next()
	}
	if err := p.primary(); err != nil {
		return err
	}
	if p.peek().kind == "range" { // a range: only after a selector or a subquery, checked loosely
		p.next()
	}
	if p.peek().text == "offset" {
		p.next()
		if t := p.next(); t.kind != "duration" || !duration.MatchString(t.text) {
			return fmt.Errorf("offset %q: not a duration", t.text)
		}
	}
	return nil
}

func (p *parser) primary() error {
	t := p.next()
	switch t.kind {
	case "number", "string":
		return nil
	case "punct":
		if t.text == "(" {
			if err := p.expr(0); err != nil {
				return err
			}
			return p.expect(")")
		}
		if t.text == "{" {
			p.pos--
			return p.selector("")
		}
	case "ident":
		if _, ok := aggregations[t.text]; ok {
			return p.aggregation(t.text)
		}
		if arity, ok := functions[t.text]; ok && p.peek().text == "(" {
			p.next()
			n, err := p.args()
			if err != nil {
				return fmt.Errorf("%s: %w", t.text, err)
			}
			if n < arity[0] || (arity[1] >= 0 && n > arity[1]) {
				return fmt.Errorf("%s takes %d to %d arguments, given %d", t.text, arity[0], arity[1], n)
			}
			return nil
		}
		if p.peek().text == "(" {
			return fmt.Errorf("unknown function %s", t.text)
		}
		if _, ok := binaryOps[t.text]; ok || t.text == "by" || t.text == "without" || t.text == "bool" || t.text == "offset" {
			return fmt.Errorf("keyword %s where an expression is wanted", t.text)
		}
		return p.selector(t.text)
	}
	return fmt.Errorf("unexpected %q", t.text)
}

// args parses the arguments of a call after its "(" up to its ")", and returns how many there were.
func (p *parser) args() (int, error) {
	if p.peek().text == ")" {
		p.next()
		return 0, nil
	}
	n := 0
	for {
		if err := p.expr(0); err != nil {
			return 0, err
		}
		n++
		switch t := p.next(); t.text {
		case ")":
			return n, nil
		case ",":
		default:
			return 0, fmt.Errorf("want , or ), found %q", t.text)
		}
	}
}

func (p *parser) aggregation(op string) error {
	var g *grouping
	clause := func() error {
		if t := p.peek().text; t != "by" && t != "without" {
			return nil
		}
		if g != nil {
			return fmt.Errorf("%s: two grouping clauses", op)
		}
		p.next()
		labels, err := p.labelList()
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		g = &grouping{labels: labels}
		return nil
	}
	if err := clause(); err != nil {
		return err
	}
	if err := p.expect("("); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	first := len(p.out.selectors)
	n, err := p.args()
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if want := map[bool]int{false: 1, true: 2}[aggregations[op]]; n != want {
		return fmt.Errorf("%s takes %d arguments, given %d", op, want, n)
	}
	if err := clause(); err != nil {
		return err
	}
	if g != nil {
		if first < len(p.out.selectors) {
			g.metric = p.out.selectors[first].metric
		}
		p.out.groupings = append(p.out.groupings, *g)
	}
	return nil
}

func (p *parser) labelList() ([]string, error) {
	if err := p.expect("("); err != nil {
		return nil, err
	}
	var labels []string
	for {
		t := p.next()
		if t.text == ")" && len(labels) == 0 {
			return labels, nil
		}
		if t.kind != "ident" {
			return nil, fmt.Errorf("label name %q", t.text)
		}
		labels = append(labels, t.text)
		switch t := p.next(); t.text {
		case ")":
			return labels, nil
		case ",":
		default:
			return nil, fmt.Errorf("want , or ) in a label list, found %q", t.text)
		}
	}
}

var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

func (p *parser) selector(metric string) error {
	s := selector{metric: metric}
	if p.peek().text == "{" {
		p.next()
		for p.peek().text != "}" {
			l := p.next()
			if l.kind != "ident" || !labelName.MatchString(l.text) {
				return fmt.Errorf("label name %q", l.text)
			}
			op := p.next()
			if op.text != "=" && op.text != "!=" && op.text != "=~" && op.text != "!~" {
				return fmt.Errorf("matcher operator %q", op.text)
			}
			v := p.next()
			if v.kind != "string" {
				return fmt.Errorf("matcher value %q: not a string", v.text)
			}
			if strings.HasSuffix(op.text, "~") {
				if _, err := regexp.Compile("^(?:" + v.text + ")$"); err != nil {
					return fmt.Errorf("matcher %s%s%q: %w", l.text, op.text, v.text, err)
				}
			}
			s.matchers = append(s.matchers, matcher{l.text, op.text, v.text})
			if p.peek().text == "," {
				p.next()
			}
		}
		p.next()
	}
	if s.metric == "" && len(s.matchers) == 0 {
		return fmt.Errorf("an empty selector")
	}
	p.out.selectors = append(p.out.selectors, s)
	return nil
}
