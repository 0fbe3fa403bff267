package classify

import "strings"

// PageType is what a request does to the site it reaches. The zero value is
// PageRead. Write-like types are ordered after PageDownload so IsWrite is a
// comparison.
type PageType uint8

const (
	PageRead PageType = iota
	PageDownload
	PageLogin
	PageOAuth
	PageUpload
	PagePublish
	PagePosting
	PageAdmin
	PagePayment
	numPageTypes
)

var pageTypeNames = [numPageTypes]string{"read", "download", "login", "oauth", "upload", "publish", "posting", "admin", "payment"}

func (p PageType) String() string {
	if p < numPageTypes {
		return pageTypeNames[p]
	}
	return "unknown"
}

// IsWrite reports whether p changes state or hands out credentials.
func (p PageType) IsWrite() bool { return p > PageDownload && p < numPageTypes }

// ParsePageType maps a config spelling ("login") to its PageType.
func ParsePageType(s string) (PageType, bool) {
	for i, n := range pageTypeNames {
		if n == s {
			return PageType(i), true
		}
	}
	return 0, false
}

// PageSet is a set of page types, one bit each.
type PageSet uint16

// Has reports whether t is in the set.
func (s PageSet) Has(t PageType) bool { return s&(1<<t) != 0 }

// With returns s plus t.
func (s PageSet) With(t PageType) PageSet { return s | 1<<t }

// DefaultPages is what a rule allows when it names no pages.
const DefaultPages = PageSet(1<<PageRead | 1<<PageDownload)

func (s PageSet) String() string {
	var b strings.Builder
	for t := PageType(0); t < numPageTypes; t++ {
		if s.Has(t) {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(t.String())
		}
	}
	return b.String()
}

// Request is what the classifier and the mirror grammars read of an HTTP
// request. Host is already normalized (lower-case, no trailing dot, IDNA
// A-label); Path and Query are as sent on the wire (still escaped; Query
// without the '?').
type Request struct {
	Method        string
	Host          string
	Port          uint16
	Path          string
	Query         string
	ContentType   string
	ContentLength int64 // -1 when unknown (chunked)
	// ReadPosts names the read-only POSTs the rule opts in to
	// ("jira-search"; see ReadPostNames). Elsewhere every POST is a write.
	ReadPosts []string
}

// PageTypeNames lists the config spellings of every page type.
func PageTypeNames() []string { return append([]string(nil), pageTypeNames[:]...) }
