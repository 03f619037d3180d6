package drain

import (
	"fmt"
	"math"
	"time"
)

// Setting names a field of Config (or of its Selector) in the engine's errors and reasons. The engine
// knows no front end: each one spells a setting its own way (the command line as its flag, through
// Selector.Names and ConfigError.Text); without a spelling, a setting is its field's name.
type Setting string

const (
	SettingDelay           Setting = "Delay"
	SettingMinDuration     Setting = "MinDuration"
	SettingQuietPeriod     Setting = "QuietPeriod"
	SettingTimeout         Setting = "Timeout"
	SettingInterval        Setting = "Interval"
	SettingThreshold       Setting = "Threshold"
	SettingMode            Setting = "Mode"
	SettingListenerDrain   Setting = "ListenerDrain"
	SettingGoneAfter       Setting = "GoneAfter"
	SettingListenerInclude Setting = "Selector.Include"
	SettingListenerExclude Setting = "Selector.Exclude"
)

// Names spells settings for people; nil spells each as its field's name.
type Names func(Setting) string

func (n Names) of(s Setting) string {
	if n == nil {
		return string(s)
	}
	return n(s)
}

// ConfigError is an invalid Config: Setting is the field at fault. Its message may name other settings
// too; Text spells them all the caller's way, Error as field names.
type ConfigError struct {
	Setting Setting
	text    func(Names) string
}

func (e *ConfigError) Error() string { return e.text(nil) }

// Text is the message with every setting spelled by names.
func (e *ConfigError) Text(names Names) string { return e.text(names) }

// invalid is a ConfigError whose message is the setting followed by problem.
func invalid(s Setting, problem string) *ConfigError {
	return &ConfigError{Setting: s, text: func(n Names) string { return n.of(s) + " " + problem }}
}

// invalidValue is a ConfigError for a value that does not parse: "setting: err".
func invalidValue(s Setting, err error) *ConfigError {
	return &ConfigError{Setting: s, text: func(n Names) string { return fmt.Sprintf("%s: %v", n.of(s), err) }}
}

// AddDurations adds durations, saturating at the largest (or smallest) Duration instead of wrapping:
// flag values such as --drain-delay=2562047h plus --min-drain-duration must not overflow past a check.
func AddDurations(ds ...time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		switch {
		case d > 0 && sum > math.MaxInt64-d:
			sum = math.MaxInt64
		case d < 0 && sum < math.MinInt64-d:
			sum = math.MinInt64
		default:
			sum += d
		}
	}
	return sum
}
