package scaling

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"

	"github.com/forgeci/forgeci/shared/awsenv"
)

// AutoScaling is Groups over EC2 Auto Scaling. AWS_ENDPOINT_URL_AUTO_SCALING
// (read by awsenv) points it elsewhere: the tests' fake.
type AutoScaling struct{ client *autoscaling.Client }

// NewAutoScaling makes the client from the environment's credentials.
func NewAutoScaling() (*AutoScaling, error) {
	cfg, err := awsenv.Config("", "", "")
	if err != nil {
		return nil, fmt.Errorf("auto scaling: %w", err)
	}
	return &AutoScaling{autoscaling.NewFromConfig(cfg, func(o *autoscaling.Options) {
		o.BaseEndpoint = awsenv.Endpoint("AUTO_SCALING")
	})}, nil
}

// Desired reads the groups' capacities, a page at a time; a group that
// does not exist is left out (the scaler says so and goes on with the
// others).
func (a *AutoScaling) Desired(ctx context.Context, names []string) (map[string]Capacity, error) {
	m := map[string]Capacity{}
	pages := autoscaling.NewDescribeAutoScalingGroupsPaginator(a.client,
		&autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: names})
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("describe auto scaling groups: %w", err)
		}
		for _, g := range out.AutoScalingGroups {
			m[aws.ToString(g.AutoScalingGroupName)] = Capacity{Desired: int(aws.ToInt32(g.DesiredCapacity)), Max: int(aws.ToInt32(g.MaxSize))}
		}
	}
	return m, nil
}

// SetDesired sets a group's desired capacity. It is idempotent, so the
// SDK's retries of a lost answer are safe.
func (a *AutoScaling) SetDesired(ctx context.Context, name string, n int) error {
	_, err := a.client.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String(name),
		DesiredCapacity: aws.Int32(int32(n)), HonorCooldown: aws.Bool(false)})
	if err != nil {
		return fmt.Errorf("set desired capacity of %s to %d: %w", name, n, err)
	}
	return nil
}
