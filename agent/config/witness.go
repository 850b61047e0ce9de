package config

// DefaultWitnessDevice is the TPM a witness = "tpm" uses unless
// witness_device names another: the kernel's resource-managed device, which
// several users may share.
const DefaultWitnessDevice = "/dev/tpmrm0"

// witness applies the rollback witness's defaults and checks its keys.
func (v *checker) witness() {
	s := &v.c.Steward
	if s.Witness == "" {
		s.Witness = "none" // only for the check below; restored after
		defer func() { s.Witness = "" }()
	}
	if !v.oneOf("steward.witness", s.Witness, "none", "tpm") {
		return
	}
	if s.Witness == "none" {
		for _, k := range []string{"steward.witness_device", "steward.witness_index"} {
			if v.ix.has(k) {
				v.problem(k, "is set but steward.witness is %q; set witness = \"tpm\" to use it", s.Witness)
			}
		}
		return
	}
	if s.WitnessDevice == "" {
		s.WitnessDevice = DefaultWitnessDevice
	}
	if v.ix.has("steward.witness_index") && s.WitnessIndex>>24 != 0x01 {
		v.problem("steward.witness_index", "%#08x is not a TPM NV index (0x01000000-0x01ffffff)", s.WitnessIndex)
	}
}
