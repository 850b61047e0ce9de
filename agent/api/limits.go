package api

import (
	"net/http"

	"meshd/agent"
)

// limitStatus is a serve refused before any work for asking more than a
// cap allows: 400 in OpenAI's shape, param the request's field, the
// message naming the value and the cap.
func limitStatus(le *agent.LimitError, e apiError) (int, apiError) {
	e.Code, e.Type, e.Param = "over_limit", "invalid_request_error", le.Field
	return http.StatusBadRequest, e
}

// renameParam names max_tokens as the body did (chat's
// max_completion_tokens).
func renameParam(e apiError, mtParam string) apiError {
	if e.Param == "max_tokens" && mtParam != "" {
		e.Param = mtParam
	}
	return e
}
