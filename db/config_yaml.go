package db

import (
	"encoding/json"
	"fmt"
	"math"

	"go.yaml.in/yaml/v3"
)

// ConfigJSON reads a configuration file written in YAML (or JSON, which is YAML) and returns it as
// JSON, for the SQL functions that check and store it (api.job_config_load, api.cache_config_load).
// Mapping keys become strings; YAML's True and False are booleans. It checks only that the text is
// YAML whose top level is a mapping: the rules are the SQL's.
func ConfigJSON(data []byte) (json.RawMessage, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("the configuration is not valid YAML: %w", err)
	}
	if doc == nil {
		return nil, fmt.Errorf("the configuration is empty")
	}
	v, err := jsonable(doc, "")
	if err != nil {
		return nil, err
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("the configuration must be a mapping at its top level")
	}
	return json.Marshal(v)
}

// jsonable turns what yaml.v3 decodes into values encoding/json can write; at names the key for
// errors.
func jsonable(v any, at string) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			c, err := jsonable(e, join(at, k))
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			ks := fmt.Sprint(k)
			c, err := jsonable(e, join(at, ks))
			if err != nil {
				return nil, err
			}
			out[ks] = c
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			c, err := jsonable(e, fmt.Sprintf("%s[%d]", at, i+1))
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return nil, fmt.Errorf("%s: %v is not a number JSON can hold", at, x)
		}
		return x, nil
	case nil, bool, string, int, int64, uint64:
		return x, nil
	default:
		// Timestamps and binary values: their text.
		return fmt.Sprint(x), nil
	}
}

func join(at, k string) string {
	if at == "" {
		return k
	}
	return at + "." + k
}
