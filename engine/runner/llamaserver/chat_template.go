package llamaserver

import (
	"meshd/engine/runner/chat"
)

// parseChatTemplate compiles the configured template, or ChatML when
// none is set (llama-server's fallback). A template that does not compile
// leaves chat completions answering 500 with the reason; the rest of the
// API is unaffected.
func (s *Server) parseChatTemplate() {
	if s.ChatTemplate == "" {
		s.chatTpl = chat.Default()
		return
	}
	s.chatTpl, s.chatErr = chat.Parse(s.ChatTemplate)
}

// chatTemplateSource is the template in use, as /props reports it.
func (s *Server) chatTemplateSource() string {
	if s.chatTpl != nil {
		return s.chatTpl.Source()
	}
	return s.ChatTemplate
}

// renderChat renders a conversation with the chat template and a
// generation prompt for the assistant. A leading BOS text is dropped when
// the tokenizer adds BOS itself, so the prompt never starts with two.
func (s *Server) renderChat(msgs []roleText) (string, error) {
	if s.chatErr != nil {
		return "", s.chatErr
	}
	cm := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		cm[i] = chat.Message{Role: m.role, Content: m.text}
	}
	bos, eos := s.specialText()
	tok := s.info.tok
	out, err := s.chatTpl.Render(cm, chat.Options{AddGenerationPrompt: true, BOS: bos, EOS: eos,
		TokenizerAddsBOS: tok.AddBOS && tok.BOS >= 0, TokenizerAddsEOS: tok.AddEOS && tok.EOS >= 0})
	if err != nil {
		// The template refused the conversation (raise_exception, for
		// example roles that do not alternate).
		return "", badRequest("%v", err)
	}
	return out, nil
}
