package requests

import "strconv"

// fpath is the JSON path of a field, built without allocating while a body
// is valid and turned into a string only for an error message.
type fpath struct {
	segs [6]pathSeg
	n    int
}

// pathSeg is one step: an object key, or an array index when key is "".
type pathSeg struct {
	key string
	idx int
}

// root returns the path of a top-level key.
func root(key string) fpath { return fpath{}.key(key) }

// key returns p.key.
func (p fpath) key(k string) fpath {
	if p.n < len(p.segs) {
		p.segs[p.n] = pathSeg{key: k}
		p.n++
	}
	return p
}

// idx returns p[i].
func (p fpath) idx(i int) fpath {
	if p.n < len(p.segs) {
		p.segs[p.n] = pathSeg{idx: i}
		p.n++
	}
	return p
}

// String renders the path as "messages[2].content[0].text".
func (p fpath) String() string {
	var b []byte
	for _, s := range p.segs[:p.n] {
		if s.key == "" {
			b = append(b, '[')
			b = strconv.AppendInt(b, int64(s.idx), 10)
			b = append(b, ']')
			continue
		}
		if len(b) > 0 {
			b = append(b, '.')
		}
		b = append(b, s.key...)
	}
	return string(b)
}

// err builds an *Error at this path.
func (p fpath) err(msg string) *Error { return &Error{Field: p.String(), Message: msg} }

// typeErr builds "must be X, got Y" at this path.
func (p fpath) typeErr(want string, v []byte) *Error {
	return &Error{Field: p.String(), Message: want + ", got " + kindName(kindOf(v))}
}
