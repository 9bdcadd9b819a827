"""What a drafter is: its effective config, its layout's tensor roles, the tensors it must hold, reference specs."""
