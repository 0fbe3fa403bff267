package policy

import "github.com/egressd/egressd/policy/classify"

// The request classifiers live in policy/classify; these aliases keep
// policy the one import its callers need.
type (
	PageType      = classify.PageType
	PageSet       = classify.PageSet
	Mirror        = classify.Mirror
	Request       = classify.Request
	MirrorOptions = classify.MirrorOptions
	MirrorVerdict = classify.MirrorVerdict
	Probe         = classify.Probe
)

// Page types.
const (
	PageRead     = classify.PageRead
	PageDownload = classify.PageDownload
	PageLogin    = classify.PageLogin
	PageOAuth    = classify.PageOAuth
	PageUpload   = classify.PageUpload
	PagePublish  = classify.PagePublish
	PagePosting  = classify.PagePosting
	PageAdmin    = classify.PageAdmin
	PagePayment  = classify.PagePayment
	DefaultPages = classify.DefaultPages
	MirrorNone   = classify.MirrorNone
)

// Mirror ecosystems, as each eco_<name>.go file of classify registers them.
var (
	MirrorPyPI     = classify.MirrorPyPI
	MirrorNPM      = classify.MirrorNPM
	MirrorCrates   = classify.MirrorCrates
	MirrorRubyGems = classify.MirrorRubyGems
	MirrorMaven    = classify.MirrorMaven
	MirrorGoProxy  = classify.MirrorGoProxy
	MirrorApt      = classify.MirrorApt
	MirrorOCI      = classify.MirrorOCI
	MirrorGit      = classify.MirrorGit
	MirrorGeneric  = classify.MirrorGeneric
)

// Classifier entry points.
var (
	ParsePageType   = classify.ParsePageType
	ParseMirror     = classify.ParseMirror
	ClassifyPage    = classify.ClassifyPage
	CheckMirror     = classify.CheckMirror
	CheckMirrorBody = classify.CheckMirrorBody
	CheckedBody     = classify.CheckedBody
	PublishProbe    = classify.PublishProbe
	MirrorNames     = classify.MirrorNames
	BasePathOK      = classify.BasePathOK
)
