package domain

// MaxLabels bounds a runner's or a job's labels.
const MaxLabels = 32

// ValidateLabels checks runner or job labels: at most MaxLabels, each
// valid, none repeated. The parser checks a job's as it makes them, the
// store a runner's and, again, a job's.
func ValidateLabels(labels []string) error {
	if len(labels) > MaxLabels {
		return Errorf(EInvalid, "at most %d labels are allowed", MaxLabels)
	}
	seen := map[string]bool{}
	for _, l := range labels {
		if !ValidLabel(l) {
			return Errorf(EInvalid, "label %q is not valid: use letters, digits and . _ : / - (at most 64)", l)
		}
		if seen[l] {
			return Errorf(EInvalid, "label %q is repeated", l)
		}
		seen[l] = true
	}
	return nil
}
