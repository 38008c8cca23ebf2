package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// days is a duration flag that also takes whole days, as retention
// settings are written: 30d, or anything time.ParseDuration reads (2m,
// 720h).
type days struct{ d *time.Duration }

func daysFlag(d *time.Duration) days { return days{d} }

func (v days) String() string {
	if v.d == nil || *v.d == 0 {
		return "0"
	}
	if *v.d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(*v.d/(24*time.Hour)), 10) + "d"
	}
	return v.d.String()
}

func (v days) Set(s string) error {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		k, err := strconv.ParseUint(n, 10, 16)
		if err != nil {
			return fmt.Errorf("%q: want a number of days, such as 30d, or a duration, such as 720h", s)
		}
		*v.d = time.Duration(k) * 24 * time.Hour
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("%q: want a duration, such as 2m or 720h, or a number of days, such as 30d", s)
	}
	*v.d = d
	return nil
}
